"""Lower an exported program for one backend and serialize it; read what the program contains."""

from __future__ import annotations

from collections import Counter
from typing import Any

import torch

from deployc.errors import BuildError
from deployc.plan import Lower


def _partitioners(step: Lower, scheme: str) -> list[Any]:
    if step.backend == "xnnpack":
        from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner

        return [XnnpackPartitioner()]
    if step.backend == "vulkan":
        from executorch.backends.vulkan.partitioner.vulkan_partitioner import VulkanPartitioner

        options = dict(step.options)
        if scheme == "fp16":
            options.setdefault("force_fp16", True)
        return [VulkanPartitioner(options)]
    if step.backend == "portable":
        return []
    raise BuildError(f"backend {step.backend} cannot be lowered on this machine")


def lower_program(programs: dict[str, torch.export.ExportedProgram], step: Lower,
                  scheme: str) -> tuple[dict[str, Any], Any]:
    """(facts about the partitioned graphs, executorch program manager) for one program of 1+ methods."""
    from executorch.exir import ExecutorchBackendConfig, to_edge_transform_and_lower

    if step.backend == "cortex_m":
        return _lower_cortex_m(programs["forward"], step)
    try:
        constants = {f"get_{k}": v for k, v in sorted(step.constants.items())} or None
        edge = to_edge_transform_and_lower(programs, partitioner=_partitioners(step, scheme),
                                           constant_methods=constants)
        facts = graph_facts(edge)  # before to_executorch, which rewrites the graph into out-variants in place
        program = edge.to_executorch(ExecutorchBackendConfig())
    except BuildError:
        raise
    except Exception as exc:
        raise BuildError(f"lowering for {step.backend} failed: {type(exc).__name__}: {str(exc)[:400]}") from exc
    return facts, program


def _lower_cortex_m(ep: torch.export.ExportedProgram, step: Lower) -> tuple[Any, Any]:
    from executorch.backends.cortex_m.edge_compile_config import cortex_m_edge_compile_config
    from executorch.backends.cortex_m.passes.cortex_m_pass_manager import CortexMPassManager
    from executorch.backends.cortex_m.target_config import CortexM, CortexMTargetConfig
    from executorch.exir import ExecutorchBackendConfig, to_edge

    cpu_name = str(step.options.get("cpu", "cortex-m55")).lower().replace("cortex-", "").replace("+", "PLUS").upper()
    if cpu_name not in CortexM.__members__:
        raise BuildError(f"unit option cpu: {step.options.get('cpu')!r} is not a Cortex-M core; "
                         f"choose one of {', '.join('cortex-' + n.lower() for n in CortexM.__members__)}")
    try:
        edge = to_edge(ep, compile_config=cortex_m_edge_compile_config())
        transformed = CortexMPassManager(edge.exported_program(), CortexMPassManager.pass_list,
                                         target_config=CortexMTargetConfig(cpu=CortexM[cpu_name])).transform()
        # executorch 1.5.1 has no public setter for a transformed method (measured; see executorch-notes.md).
        edge._edge_programs["forward"] = transformed
        facts = graph_facts(edge)
        program = edge.to_executorch(ExecutorchBackendConfig())
    except Exception as exc:
        raise BuildError(f"lowering for cortex_m failed: {type(exc).__name__}: {str(exc)[:400]}") from exc
    return facts, program


def _op_name(target: Any) -> str:
    name = getattr(target, "__name__", None) or str(target)
    return str(name).split(":")[0].replace("<EdgeOpOverload: ", "").strip(">")


def graph_facts(edge: Any) -> dict[str, Any]:
    """Delegates per backend, the share of operators delegated, and the operators left outside."""
    from executorch.exir.lowered_backend_module import LoweredBackendModule

    delegated: Counter[str] = Counter()
    delegated_ops = 0
    outside: list[str] = []
    for method in sorted(edge.methods):
        gm = edge.exported_program(method).graph_module
        for _, child in gm.named_children():
            if isinstance(child, LoweredBackendModule):
                delegated[child.backend_id] += 1
                delegated_ops += sum(1 for n in child.original_module.graph.nodes if n.op == "call_function")
        outside += [_op_name(n.target) for n in gm.graph.nodes
                    if n.op == "call_function" and _op_name(n.target) not in ("executorch_call_delegate", "getitem")]
    total = delegated_ops + len(outside)
    return {
        "delegates": dict(sorted(delegated.items())),
        "delegated_ops": delegated_ops,
        "total_ops": total,
        "delegated_share": round(delegated_ops / total, 4) if total else 0.0,
        "non_delegated_ops": sorted(set(outside)),
    }


def program_facts(program: Any) -> dict[str, Any]:
    """Per method: planned memory, the operators a runtime must register, delegate ids."""
    methods = {}
    for plan in program.executorch_program.execution_plan:
        methods[plan.name] = {
            "planned_memory_bytes": int(sum(plan.non_const_buffer_sizes)),
            "operators": sorted({f"{op.name}.{op.overload}" if op.overload else op.name for op in plan.operators}),
            "delegates": sorted({d.id for d in plan.delegates}),
        }
    return {"methods": methods}
