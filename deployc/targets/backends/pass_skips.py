"""ExecuTorch's graph passes skipped where a graph has nothing they act on.

Most of ExecuTorch's passes are ExportPasses: whatever they change, they end by retracing the whole graph with
fake tensors, and on a decoder's dynamic graph a retrace is seconds (SmolLM2's `gguf` graph cut to six layers:
1.3-2.4 s a pass). A pass that acts only on certain operators changes nothing on a graph without them; skipped
there, the passes after it see the same graph and the program is the same bytes (the tests lower models with and
without each skip, the pass acting in one and skipped in another).

`skip_unless` is the mechanism; the edge dialect's passes that every backend's lowering runs are wrapped here
(`install`), XNNPACK's own in xnnpack_patterns.py beside it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

TRANSPOSE = "aten.t.default"  # what NormalizeTransposePass replaces (by t_copy)


def calls(graph_module: Any) -> Iterator[Any]:
    """Every operator call of the graph and of the graphs nested in it (control flow)."""
    import torch

    for module in graph_module.modules():
        if isinstance(module, torch.fx.GraphModule):
            yield from (n for n in module.graph.nodes if n.op == "call_function")


def operator_name(target: Any) -> str:
    """An operator's name, "aten.t.default": an edge operator's is the ATen operator's it wraps (its `_op`; an
    ATen operator's own `_op` is its C++ handle)."""
    import torch

    return str(target if isinstance(target, torch._ops.OpOverload) else getattr(target, "_op", target))


def operator_names(graph_module: Any) -> set[str]:
    """The names of a graph's operators."""
    return {operator_name(n.target) for n in calls(graph_module)}


def has_view(graph_module: Any) -> bool:
    """Does the graph call an aliasing view operator (what ReplaceBrokenOpsWithFunctionalOpsPass replaces)?"""
    import torch

    return any(isinstance(n.target, torch._ops.OpOverload) and n.target.is_view for n in calls(graph_module))


def symbol_for_tensor(graph_module: Any) -> bool:
    """Does an operator take a symbolic size (SymInt, SymFloat, SymBool) where its schema has a tensor (what
    SymToTensorPass wraps in a `scalar_tensor`)? As ExecuTorch's map_args reads arguments: the schema's, top level."""
    import torch

    symbolic = (torch.SymInt, torch.SymFloat, torch.SymBool)
    for node in calls(graph_module):
        if not isinstance(node.target, torch._ops.OpOverload):
            continue
        for i, argument in enumerate(node.target._schema.arguments):
            if argument.name in node.kwargs:
                value = node.kwargs[argument.name]
            elif not argument.kwarg_only and i < len(node.args):
                value = node.args[i]
            else:
                continue
            if (isinstance(argument.type, torch.TensorType) and isinstance(value, torch.fx.Node)
                    and isinstance(value.meta.get("val"), symbolic)):
                return True
    return False


def skip_unless(cls: type, can_act: Callable[[Any], bool]) -> None:
    """Run pass `cls` only on graphs where `can_act`; elsewhere it returns the graph unchanged. Once per class."""
    from torch.fx.passes.infra.pass_base import PassResult

    original = cls.call  # type: ignore[attr-defined]
    if getattr(original, "skips", False):
        return

    def call(self: Any, graph_module: Any) -> Any:
        if can_act(graph_module):
            return original(self, graph_module)
        return PassResult(graph_module, False)

    call.skips = True  # type: ignore[attr-defined]
    cls.call = call  # type: ignore[attr-defined]


def install() -> None:
    """Wrap the edge dialect's passes that act on one kind of argument (once per process). On SmolLM2's cut all
    three found nothing: the transpose is exported as `transpose`, the views are view copies by then, and no
    size reaches a tensor argument (SymToTensorPass's retrace: 1.9 s of the cut's 36 s lowering)."""
    from executorch.exir.passes.normalize_transpose_pass import NormalizeTransposePass
    from executorch.exir.passes.replace_broken_ops_with_function_ops_pass import (
        ReplaceBrokenOpsWithFunctionalOpsPass,
    )
    from executorch.exir.passes.sym_to_tensor_pass import SymToTensorPass

    skip_unless(NormalizeTransposePass, lambda gm: TRANSPOSE in operator_names(gm))
    skip_unless(ReplaceBrokenOpsWithFunctionalOpsPass, has_view)
    skip_unless(SymToTensorPass, symbol_for_tensor)
