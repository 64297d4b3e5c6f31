"""Inference batch norms that follow a linear layer, folded into its weight and bias (docs/architecture.md,
"graph")."""

from __future__ import annotations

from typing import Any

import torch

from deployc.core.graph_edits import attribute
from deployc.graph.constants import drop_unread, register

_BATCH_NORM = "aten.batch_norm.default"
_LINEAR = "aten.linear.default"
# Ops that only merge the leading dims of a linear's output: the feature dim stays last, where a 2-D batch
# norm normalises it.
_MERGING = frozenset({"aten.flatten.using_ints", "aten.view.default", "aten.reshape.default",
                      "aten._unsafe_view.default"})
# Ops that read only another tensor's shape from their second argument.
_SHAPE_OF = frozenset({"aten.reshape_as.default", "aten.view_as.default", "aten.expand_as.default"})


def fold_into_linears(model: torch.fx.GraphModule) -> int:
    """Fold each inference batch norm over a linear layer's features into that linear's weight and bias:
    one over its output features (LeViT's `MLPLayerWithBN`: linear, flatten to rows, BatchNorm1d) or over
    its input features (LeViT's classifier: BatchNorm1d, then linear), as quantization already does for
    a convolution's. Folded, the model computes the same values in float (to rounding) and its int8 form
    one operator fewer; left apart, QNN's HTP computed LeViT's batch norms with 16-bit activations as a
    negated copy at 1/256 of the value (cosine -0.9997 on the first: every 16a8w output unrelated to
    eager's, where the fake-quantized model had 29.6 dB). Returns how many were folded."""
    folded, replaced = 0, set()
    for node in list(model.graph.nodes):
        after, before = _linear_under(node), _linear_over(node)
        linear = after if after is not None else before
        if linear is None:
            continue
        weight = attribute(model, linear.args[1].target)
        bias = attribute(model, linear.args[2].target) if len(linear.args) > 2 and linear.args[2] is not None \
            else torch.zeros(weight.shape[0], dtype=weight.dtype)
        gamma, beta = (attribute(model, a.target) if a is not None else None for a in node.args[1:3])
        mean, var = (attribute(model, a.target) for a in node.args[3:5])
        with torch.no_grad():
            scale: torch.Tensor = torch.rsqrt(var + float(node.args[7]))
            if gamma is not None:
                scale = scale * gamma
            shift = -mean * scale if beta is None else beta - mean * scale  # the norm is x * scale + shift
            if after is not None:  # W (x) * scale + shift
                new_weight, new_bias = weight * scale[:, None], bias * scale + shift
            else:  # W (x * scale + shift)
                new_weight, new_bias = weight * scale[None, :], bias + weight @ shift
        with model.graph.inserting_before(linear):
            w = model.graph.get_attr(register(model, new_weight))
            b = model.graph.get_attr(register(model, new_bias))
        replaced |= {str(a.target) for a in (*linear.args[1:3], *node.args[1:5]) if a is not None}
        linear.args = (linear.args[0] if after is not None else node.args[0], w, b)
        node.replace_all_uses_with(node.args[0])
        model.graph.erase_node(node)
        folded += 1
    if folded:
        drop_unread(model, replaced)
    return folded


def _inference_norm(node: Any) -> bool:
    return (node.op == "call_function" and str(node.target) == _BATCH_NORM and node.args[5] is False
            and all(a is None or getattr(a, "op", None) == "get_attr" for a in node.args[1:3])
            and all(getattr(a, "op", None) == "get_attr" for a in node.args[3:5]))  # running statistics


def _static_linear(node: Any) -> bool:
    return (str(getattr(node, "target", "")) == _LINEAR and node.args[1].op == "get_attr"
            and (len(node.args) < 3 or node.args[2] is None or node.args[2].op == "get_attr"))


def _linear_over(node: Any) -> Any:
    """The linear that alone reads a 2-D inference batch norm's output, as its input (the norm's channels are
    its input features)."""
    if not _inference_norm(node) or len(node.users) != 1:
        return None
    linear = next(iter(node.users))
    rows = node.meta.get("val")
    if not _static_linear(linear) or linear.args[0] is not node or rows is None or rows.dim() != 2:
        return None
    return linear


def _linear_under(node: Any) -> Any:
    """The linear a 2-D inference batch norm normalises the output features of, where folding it changes
    nothing else: its weight and bias are attributes, and its output is read only through the batch norm
    (or for its shape)."""
    if not _inference_norm(node):
        return None
    source = node.args[0]
    chain = []
    while str(getattr(source, "target", "")) in _MERGING:
        chain.append(source)
        source = source.args[0]
    if not _static_linear(source):
        return None
    rows = node.args[0].meta.get("val")
    out = source.meta.get("val")
    if rows is None or out is None or rows.dim() != 2 or rows.shape[-1] != out.shape[-1]:
        return None
    readers = [source, *chain]
    for reader, next_one in zip(readers, [*chain, node]):
        if any(u is not next_one and not (str(u.target) in _SHAPE_OF and u.args[0] is not reader)
               for u in reader.users):
            return None
    return source
