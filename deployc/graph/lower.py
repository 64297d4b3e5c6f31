"""Lower an exported program with its backend and serialize it; read what the program contains."""

from __future__ import annotations

import copy
from collections import Counter
from pathlib import Path
from typing import Any

import torch

from deployc.core.errors import BuildError
from deployc.core.quantization import Recipe
from deployc.plan.build_plan import Lower
from deployc.targets.backends import BACKENDS

WEIGHTS_TAG = "weights"  # every external tensor goes to one data file, weights.ptd


def tag_external_weights(program: torch.export.ExportedProgram) -> None:
    """Mark every parameter, buffer and lifted constant for the data file: delegates (XNNPACK) read the
    tag from the placeholder's custom meta when they serialize their weights; to_executorch's
    external_constants moves the non-delegated ones. Nodes computed from constants alone are marked
    too: for a quantized weight XNNPACK reads the tag from the dequantize node it serializes, not the
    placeholder, and without it the int8/int4 weights stayed inside the .pte (measured: 589 KB left in
    a .pte of an 8da4w model, 3 KB with the chain marked)."""
    sig = program.graph_signature
    names = {*sig.inputs_to_parameters, *sig.inputs_to_buffers, *sig.inputs_to_lifted_tensor_constants}
    constant: set[torch.fx.Node] = set()
    for node in program.graph.nodes:  # in graph order: a node's inputs come before it
        if node.op == "placeholder" and node.name in names:
            constant.add(node)
        elif node.op == "call_function" and node.all_input_nodes and all(a in constant for a in node.all_input_nodes):
            constant.add(node)
        else:
            continue
        node.meta.setdefault("custom", {})["delegate_constant_tag"] = WEIGHTS_TAG


def drop_unused_constants(program: torch.export.ExportedProgram) -> list[str]:
    """Remove the constant inputs (parameters, buffers, lifted tensors) that no node reads any more; returns
    their names. A delegate takes the constants of what it swallows, but a constant whose readers a pass
    removed stays in the method's signature, and ExecuTorch serializes it anyway. When every constant left
    outside the delegates is empty (transformers' KV cache starts as `torch.tensor([])`, and
    concatenating onto it folds away), the program gets a constant segment of zero bytes, which the
    runtime then cannot load ("constant_buffer path is disabled", error 0x23; 13 transformers decoders on
    the npu). ExecuTorch's own pass (remove_unused_parameters_pass) drops only unused parameters."""
    from torch.export.graph_signature import InputKind

    kinds = (InputKind.PARAMETER, InputKind.BUFFER, InputKind.CONSTANT_TENSOR)
    placeholders = {n.name: n for n in program.graph.nodes if n.op == "placeholder"}
    unused = [spec for spec in program.graph_signature.input_specs
              if spec.kind in kinds and spec.target is not None
              and not placeholders[spec.arg.name].users]
    if not unused:
        return []
    for spec in unused:
        program.graph_signature.input_specs.remove(spec)
        program.graph.erase_node(placeholders[spec.arg.name])
        table = program.constants if spec.kind == InputKind.CONSTANT_TENSOR or spec.persistent is False \
            else program.state_dict
        table.pop(spec.target, None)
    program.graph_module.recompile()
    return [str(spec.target) for spec in unused]


def lower_program(programs: dict[str, torch.export.ExportedProgram], step: Lower,
                  recipe: Recipe, external_weights: bool = False,
                  etrecord: Path | None = None, plan_inputs: bool = True) -> tuple[dict[str, Any], Any, Any]:
    """(facts about the partitioned graphs, executorch program manager, the lowered forward as a
    PyTorch module when the backend verifies on its reference kernels, else None) for one program of
    1+ methods. With external_weights, the manager's tensor data holds one file, weights.ptd. With
    etrecord, also ExecuTorch's ETRecord of the program there (debug handles -> graph nodes). Without
    plan_inputs, ExecuTorch plans no memory for the methods' inputs: it reads the caller's tensors where they
    are (a static decoder's KV caches, which its driver keeps: no copy of them a call)."""
    from executorch.exir import ExecutorchBackendConfig
    from executorch.exir.passes import MemoryPlanningPass

    from deployc.graph import decompositions, preprocess
    from deployc.targets.backends import pass_skips

    backend = BACKENDS[step.backend]
    decompositions.install()
    pass_skips.install()
    try:
        if external_weights:
            for ep in programs.values():
                tag_external_weights(ep)
        ready = (decompositions.ahead(programs, backend.partitioner_objects(recipe, step.options))
                 if backend.decomposes_ahead else programs)
        with preprocess.shared(backend.forked_preprocess):
            edge = backend.to_edge(ready, recipe, step.options, step.constants)
        for method in edge.methods:
            drop_unused_constants(edge.exported_program(method))
        facts = graph_facts(edge)  # before to_executorch, which rewrites the graph into out-variants in place
        reference = edge.exported_program("forward").module() if backend.host_reference else None
        # to_executorch rewrites the edge graphs in place; the ETRecord needs them as lowered.
        recorded = copy.deepcopy(edge) if etrecord is not None else None
        # Quantized embedding tables export as dequantize + embedding; the fusion pass turns them into
        # ExecuTorch's quantized embedding kernels (the weights stay int8/int4 in the program).
        fusion = {"do_quant_fusion_and_const_prop": True} if recipe.embedding_bits else {}
        external = {"external_constants": lambda _node: WEIGHTS_TAG} if external_weights else {}
        unplanned = {} if plan_inputs else {"memory_planning_pass": MemoryPlanningPass(alloc_graph_input=False)}
        program = edge.to_executorch(ExecutorchBackendConfig(**backend.executorch_config(), **fusion, **external,
                                                             **unplanned))
        if etrecord is not None:
            from executorch.devtools import generate_etrecord

            generate_etrecord(str(etrecord), recorded, program, exported_program=programs)
    except BuildError:
        raise
    except Exception as exc:
        raise BuildError(f"lowering for {step.backend} failed: {type(exc).__name__}: {str(exc)[:400]}") from exc
    return facts, program, reference


def _op_name(target: Any) -> str:
    name = getattr(target, "__name__", None) or str(target)
    return str(name).split(":")[0].replace("<EdgeOpOverload: ", "").strip(">")


def graph_facts(edge: Any) -> dict[str, Any]:
    """Delegates per backend, the share of operators delegated, the operators left outside, those of them
    that compute in floating point (not a (de)quantize at the program's edge), and the kernels' scratch
    buffers (CMSIS-NN's, as `alloc` nodes the memory planner places in the arena)."""
    import torch
    from executorch.exir.lowered_backend_module import LoweredBackendModule

    delegated: Counter[str] = Counter()
    delegated_ops = 0
    outside: list[str] = []
    floating: set[str] = set()
    scratch = 0
    for method in sorted(edge.methods):
        gm = edge.exported_program(method).graph_module
        for _, child in gm.named_children():
            if isinstance(child, LoweredBackendModule):
                delegated[child.backend_id] += 1
                delegated_ops += sum(1 for n in child.original_module.graph.nodes if n.op == "call_function")
        for n in gm.graph.nodes:
            name = _op_name(n.target)
            if n.op != "call_function" or name in ("executorch_call_delegate", "getitem"):
                continue
            outside.append(name)
            val = n.meta.get("val")
            if isinstance(val, (tuple, list)) and val:  # e.g. native_layer_norm: (out, mean, rstd)
                val = val[0]
            if name == "alloc" and isinstance(val, torch.Tensor):
                scratch += val.numel() * val.element_size()
            elif isinstance(val, torch.Tensor) and val.is_floating_point() and "quantize" not in name:
                floating.add(name)
    total = delegated_ops + len(outside)
    return {
        "delegates": dict(sorted(delegated.items())),
        "delegated_ops": delegated_ops,
        "total_ops": total,
        "delegated_share": round(delegated_ops / total, 4) if total else 0.0,
        "non_delegated_ops": sorted(set(outside)),
        "float_ops": sorted(floating),
        "scratch_bytes": scratch,
    }
