"""The XNNPACK delegate's two pattern passes, run without their patterns where no pattern can match.

XNNPACK's preprocess runs ConvertToSDPAPass (a decomposed attention becomes one SDPA node) and
ConvertToUpsampleBilinear2d on every partition. Each builds its pattern graphs with torch.export and to_edge
the first time it runs in a process (about 1.5 and 2.2 s here, whatever the model), and every build worker
is a new process. The matcher pairs each operator node of a pattern with a graph node of the same target,
so a partition lacking an operator that all of a pass's patterns have cannot match: there the pass runs
with no patterns, which is what it does anyway after finding no match (the same graph, so the same bytes).
The shared operators are written here rather than found by tracing (the tracing is the cost);
tests/targets/test_xnnpack_patterns.py traces the installed ExecuTorch's real patterns and checks them.
"""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType
from typing import Any

# Operators that every SDPA pattern of ExecuTorch 1.5.1 has (its masked and unmasked attention).
SDPA_OPERATORS = frozenset({
    "aten._softmax.default", "aten.add.Tensor", "aten.any.dim", "aten.bmm.default", "aten.eq.Scalar",
    "aten.expand_copy.default", "aten.full_like.default", "aten.logical_not.default", "aten.mul.Scalar",
    "aten.permute_copy.default", "aten.view_copy.default", "aten.where.self",
    "dim_order_ops._clone_dim_order.default"})
# Every bilinear pattern is the undecomposed operator itself (which the pass then leaves as it is).
BILINEAR_OPERATORS = frozenset({"aten.upsample_bilinear2d.vec"})


def operator_names(graph_module: Any) -> set[str]:
    """The targets of a graph's operator nodes by name (an edge operator by the ATen operator it wraps)."""
    return {str(getattr(n.target, "_op", n.target)) for n in graph_module.graph.nodes if n.op == "call_function"}


def install() -> None:
    """Wrap both passes (once per process): a partition without one of their shared operators skips the
    patterns. Called before XNNPACK lowers anything."""
    from executorch.backends.xnnpack._passes.convert_to_sdpa import ConvertToSDPAPass
    from executorch.backends.xnnpack._passes.convert_to_upsample_bilinear2d import ConvertToUpsampleBilinear2d
    from executorch.backends.xnnpack.partition.graphs import bilinear_2d, sdpa

    _wrap(ConvertToSDPAPass, sdpa, "get_graphs", SDPA_OPERATORS, list)
    _wrap(ConvertToUpsampleBilinear2d, bilinear_2d, "get_graphs_dict", BILINEAR_OPERATORS, dict)


def _wrap(cls: type, patterns: ModuleType, getter: str, needed: frozenset[str], empty: Callable[[], Any]) -> None:
    original = cls.call  # type: ignore[attr-defined]
    if getattr(original, "skips_patterns", False):
        return

    def call(self: Any, graph_module: Any) -> Any:
        if needed <= operator_names(graph_module):
            return original(self, graph_module)
        real = getattr(patterns, getter)
        setattr(patterns, getter, empty)  # the pass looks its patterns up on the module as it runs
        try:
            return original(self, graph_module)
        finally:
            setattr(patterns, getter, real)

    call.skips_patterns = True  # type: ignore[attr-defined]
    cls.call = call  # type: ignore[attr-defined]
