"""What an ExecuTorch program holds, read from its flatbuffer schema object: per method the planned
memory, the operators a runtime must register and the delegates. One reader for the build (on the
program it just serialized) and for `deployc inspect` (on a .pte file)."""

from __future__ import annotations

from typing import Any

from deployc.core.records import Frozen


class MethodFacts(Frozen):
    planned_memory_bytes: int
    operators: list[str]
    delegates: list[str]
    inputs: int
    outputs: int


def read_program(data: bytes) -> Any:
    """The executorch.exir.schema.Program of a .pte's bytes (raises on a foreign or damaged file)."""
    from executorch.exir._serialize._program import deserialize_pte_binary

    return deserialize_pte_binary(data).program


def method_facts(program: Any) -> dict[str, MethodFacts]:
    out = {}
    for plan in program.execution_plan:
        out[plan.name] = MethodFacts(
            planned_memory_bytes=int(sum(plan.non_const_buffer_sizes)),
            operators=sorted({f"{op.name}.{op.overload}" if op.overload else op.name for op in plan.operators}),
            delegates=sorted({d.id for d in plan.delegates}),
            inputs=len(plan.inputs), outputs=len(plan.outputs))
    return out


def data_bytes(program: Any) -> tuple[int, int]:
    """(bytes of constants stored in the program, bytes of its delegate segments)."""
    return (sum(len(b.storage) for b in program.constant_buffer), sum(s.size for s in program.segments))
