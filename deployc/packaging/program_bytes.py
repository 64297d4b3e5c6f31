"""Where a .pte's bytes go: quantized weights, float weights, quantization scales, and the rest (the
graph, operator tables, delegate headers, padding), read from the file itself.

Weights outside delegates are the program's constant tensors, classed by dtype; a float constant that a
`quantized_decomposed` kernel takes as its scales or zero points counts as scales. Weights inside
a delegate are counted by its backend module (`weight_bytes`: XNNPACK reads its graph); the payloads of
the others (QNN context binaries, Vulkan shaders) are opaque and count as the rest."""

from __future__ import annotations

from typing import Any

from deployc.core.records import Frozen

# executorch ScalarType -> bytes per element (the types a constant tensor uses)
_ELEMENT_BYTES = {0: 1, 1: 1, 2: 2, 3: 4, 4: 8, 5: 2, 6: 4, 7: 8, 11: 1, 12: 1, 13: 1, 14: 4, 15: 2, 22: 2}
_FLOATS = {5, 6, 7, 15}  # half, float, double, bfloat16


class ByteKinds(Frozen):
    quantized_weights: int
    float_weights: int
    scales: int
    other: int  # graph, operator tables, delegate headers and opaque delegate payloads, padding


def _tensor_bytes(tensor: Any) -> int:
    n = 1
    for s in tensor.sizes:
        n *= int(s)
    return n * _ELEMENT_BYTES.get(int(tensor.scalar_type), 4)


def _constants(program: Any) -> tuple[int, int, int]:
    """(quantized, float, scales) bytes of the constant tensors outside delegates."""
    seen: dict[int, tuple[str, int]] = {}
    for plan in program.execution_plan:
        scale_values: set[int] = set()
        for chain in plan.chains:
            for instruction in chain.instructions:
                call = instruction.instr_args
                if hasattr(call, "op_index") and plan.operators[call.op_index].name.startswith(
                        "quantized_decomposed::"):
                    scale_values.update(call.args[1:3])  # (weight, scales, zero points, ...)
        for i, value in enumerate(plan.values):
            tensor = value.val
            index = getattr(tensor, "data_buffer_idx", 0)
            if not hasattr(tensor, "scalar_type") or index <= 0 or index in seen:
                continue
            kind = ("scales" if i in scale_values else "float" if int(tensor.scalar_type) in _FLOATS
                    else "quantized")
            seen[index] = (kind, _tensor_bytes(tensor))
    totals = {"quantized": 0, "float": 0, "scales": 0}
    for kind, size in seen.values():
        totals[kind] += size
    return totals["quantized"], totals["float"], totals["scales"]


def _delegate_payloads(program: Any, data: bytes) -> list[tuple[str, bytes]]:
    from executorch.exir._serialize._program import _ExtendedHeader

    header = _ExtendedHeader.from_bytes(data[8:])
    base = header.segment_base_offset if header.is_valid() else 0
    out = []
    for plan in program.execution_plan:
        for delegate in plan.delegates:
            ref = delegate.processed
            if int(ref.location) == 1:  # a segment of the file
                segment = program.segments[ref.index]
                out.append((delegate.id, data[base + segment.offset: base + segment.offset + segment.size]))
            else:
                out.append((delegate.id, bytes(program.backend_delegate_data[ref.index].data)))
    return out


def byte_kinds(program: Any, data: bytes) -> ByteKinds:
    """`program`: the deserialized Program of the .pte bytes `data`."""
    from deployc.targets.backends import BACKENDS

    readers = {b.delegate_id: b for b in BACKENDS.values() if b.delegate_id}
    quantized, floats, scales = _constants(program)
    for delegate_id, blob in _delegate_payloads(program, data):
        if delegate_id in readers:
            q, f, s = readers[delegate_id].weight_bytes(blob)
            quantized, floats, scales = quantized + q, floats + f, scales + s
    return ByteKinds(quantized_weights=quantized, float_weights=floats, scales=scales,
                     other=max(0, len(data) - quantized - floats - scales))
