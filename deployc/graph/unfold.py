"""An unfold (im2col) written as slices of the padded input, the same values: QNN's `DecomposeColIm`
pass failed on ConvBERT's span convolution (`F.unfold` of [batch, channels, tokens, 1] with a [k, 1]
kernel: "im2col can only be converted when stride == kernel_size"), so ConvBERT had no NPU program.
Slices and a concatenation are ops every backend takes; tensors stay 4-D (the HTP took no 5-D reshape
elsewhere)."""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F

_IM2COL = "aten.im2col.default"


def sliced_im2col(x: torch.Tensor, kernel: Sequence[int], dilation: Sequence[int], padding: Sequence[int],
                  stride: Sequence[int]) -> torch.Tensor:
    """What `F.unfold` computes: [B, C, H, W] -> [B, C * kh * kw, L], channel-major, each kernel offset
    (i, j) the input shifted by (i * dilation, j * dilation), strided, flattened."""
    (kh, kw), (dh, dw), (ph, pw), (sh, sw) = kernel, dilation, padding, stride
    b, c, h, w = x.shape
    if ph or pw:
        x = F.pad(x, (pw, pw, ph, ph))
    rows = (h + 2 * ph - dh * (kh - 1) - 1) // sh + 1
    columns = (w + 2 * pw - dw * (kw - 1) - 1) // sw + 1
    planes = [x[:, :, i * dh:i * dh + sh * (rows - 1) + 1:sh, j * dw:j * dw + sw * (columns - 1) + 1:sw]
              .reshape(b, c, 1, rows * columns) for i in range(kh) for j in range(kw)]
    return torch.cat(planes, dim=2).reshape(b, c * kh * kw, rows * columns)


def has_im2col(graph: torch.fx.Graph) -> bool:
    return any(str(node.target) == _IM2COL for node in graph.nodes)


def im2col_as_slices(model: torch.fx.GraphModule) -> int:
    """Make each batched im2col of `model`'s graph call sliced_im2col; returns how many. The module must be
    exported again for the graph to hold the slices as ATen ops (graph/export.py does)."""
    replaced = 0
    for node in model.graph.nodes:
        value = node.args[0].meta.get("val") if node.args and isinstance(node.args[0], torch.fx.Node) else None
        if str(node.target) == _IM2COL and isinstance(value, torch.Tensor) and value.dim() == 4:
            node.target = sliced_im2col
            replaced += 1
    if replaced:
        model.recompile()
    return replaced
