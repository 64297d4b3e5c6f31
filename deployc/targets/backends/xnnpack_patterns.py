"""The XNNPACK delegate's passes that can act only on certain operators, skipped where a partition has none.

XNNPACK's preprocess runs 17 passes on every partition, and most end by retracing the whole partition with fake
tensors (ExportPass), whatever they changed: on SmolLM2's `gguf` program each pass costs about the same,
2.4 s a pass on six of its layers (34% of the lowering). Nine of them can act only on operators most models
lack, and without those they only retrace: ConvertToSDPAPass (a decomposed attention becomes one SDPA node)
and ConvertToUpsampleBilinear2d act where a pattern matches, FuseBatchNormPass and DecomposeBatchNorm on batch
norms, Conv1dUnsqueezePass on convolutions, PReLUReshapePass on PReLU, DecomposeConcatenate on a concatenation
of more than five tensors, DimOrderOpsRevertPass on ExecuTorch's dim-order copies, FuseActivationPass on ReLU
and hardtanh (which it folds into the operator before them). Where a partition lacks what
a pass needs, the pass is skipped: the passes after it retrace the same graph, and the program is the same
bytes (tests/targets/test_xnnpack_patterns.py lowers models with and without the skip, each pass acting and
not). The mechanism, and the edge dialect's passes skipped the same way, are in pass_skips.py beside it.

A pattern pass's matcher pairs each operator node of a pattern with a graph node of the same target, so a
partition lacking an operator that all of its patterns have cannot match. Building the patterns is itself
the cost of the first call in a process (torch.export and to_edge of each pattern: about 1.5 and 2.2 s), so
the shared operators are written here rather than found by tracing; the test traces the installed
ExecuTorch's real patterns and checks them.
"""

from __future__ import annotations

from typing import Any

from deployc.targets.backends.pass_skips import operator_name, operator_names, skip_unless

# Operators that every SDPA pattern of ExecuTorch 1.5.1 has (its masked and unmasked attention).
SDPA_OPERATORS = frozenset({
    "aten._softmax.default", "aten.add.Tensor", "aten.any.dim", "aten.bmm.default", "aten.eq.Scalar",
    "aten.expand_copy.default", "aten.full_like.default", "aten.logical_not.default", "aten.mul.Scalar",
    "aten.permute_copy.default", "aten.view_copy.default", "aten.where.self",
    "dim_order_ops._clone_dim_order.default"})
# Every bilinear pattern is the undecomposed operator itself (which the pass then leaves as it is).
BILINEAR_OPERATORS = frozenset({"aten.upsample_bilinear2d.vec"})
# What the two batch-norm passes, Conv1dUnsqueezePass and PReLUReshapePass look for (each acts on nothing else).
BATCH_NORM_OPERATORS = frozenset({"aten.native_batch_norm.default",
                                  "aten._native_batch_norm_legit_no_training.default"})
CONVOLUTION = "aten.convolution.default"
PRELU = "aten._prelu_kernel.default"
# What DimOrderOpsRevertPass turns back into memory-format operators (ExecuTorch's MemoryFormatOpsMap).
DIM_ORDER_OPERATORS = frozenset({"dim_order_ops._to_dim_order_copy.default", "dim_order_ops._empty_dim_order.default",
                                 "dim_order_ops._clone_dim_order.default"})
# What FuseActivationPass folds into the operator before it (its FUSEABLE_ACTIVATIONS).
FUSED_ACTIVATIONS = frozenset({"aten.relu.default", "aten.hardtanh.default"})
# What RemoveGetItemPass folds with the getitem after it; RemoveRedundantCopyPass looks at copies alone.
INDEXED_MAXIMA = frozenset({"aten.max_pool2d_with_indices.default", "aten.max.dim"})
COPY = "aten._to_copy.default"
CONCATENATION = "aten.cat.default"
CONCATENATED_AT_ONCE = 5  # XNNPACK's concatenation takes up to five tensors; DecomposeConcatenate splits longer ones


def long_concatenation(graph_module: Any) -> bool:
    """Does the graph concatenate more tensors in one operator than XNNPACK's concatenation takes?"""
    return any(n.op == "call_function" and operator_name(n.target) == CONCATENATION
               and len(n.args[0]) > CONCATENATED_AT_ONCE for n in graph_module.graph.nodes)


def install() -> None:
    """Wrap the eleven passes (once per process): each runs only on a partition that has what it can act on.
    Called before XNNPACK lowers anything."""
    from executorch.backends.transforms.remove_getitem_op import RemoveGetItemPass
    from executorch.backends.xnnpack._passes.conv1d_unsqueeze_pass import Conv1dUnsqueezePass
    from executorch.backends.xnnpack._passes.convert_to_sdpa import ConvertToSDPAPass
    from executorch.backends.xnnpack._passes.convert_to_upsample_bilinear2d import ConvertToUpsampleBilinear2d
    from executorch.backends.xnnpack._passes.decompose_batch_norm import DecomposeBatchNorm
    from executorch.backends.xnnpack._passes.decompose_cat import DecomposeConcatenate
    from executorch.backends.xnnpack._passes.fuse_activation_pass import FuseActivationPass
    from executorch.backends.xnnpack._passes.fuse_batch_norm import FuseBatchNormPass
    from executorch.backends.xnnpack._passes.prelu_reshape_pass import PReLUReshapePass
    from executorch.backends.xnnpack._passes.remove_redundant_copy_pass import RemoveRedundantCopyPass
    from executorch.exir.passes.memory_format_ops_pass import DimOrderOpsRevertPass

    skip_unless(ConvertToSDPAPass, lambda gm: operator_names(gm) >= SDPA_OPERATORS)
    skip_unless(ConvertToUpsampleBilinear2d, lambda gm: operator_names(gm) >= BILINEAR_OPERATORS)
    skip_unless(FuseBatchNormPass, lambda gm: bool(BATCH_NORM_OPERATORS & operator_names(gm)))
    skip_unless(DecomposeBatchNorm, lambda gm: bool(BATCH_NORM_OPERATORS & operator_names(gm)))
    skip_unless(Conv1dUnsqueezePass, lambda gm: CONVOLUTION in operator_names(gm))
    skip_unless(PReLUReshapePass, lambda gm: PRELU in operator_names(gm))
    skip_unless(DimOrderOpsRevertPass, lambda gm: bool(DIM_ORDER_OPERATORS & operator_names(gm)))
    skip_unless(DecomposeConcatenate, long_concatenation)
    skip_unless(FuseActivationPass, lambda gm: bool(FUSED_ACTIVATIONS & operator_names(gm)))
    skip_unless(RemoveGetItemPass, lambda gm: bool(INDEXED_MAXIMA & operator_names(gm)))
    skip_unless(RemoveRedundantCopyPass, lambda gm: COPY in operator_names(gm))
