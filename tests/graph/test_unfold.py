"""An unfold written as slices (deployc/graph/unfold.py): the same values as im2col for ConvBERT's
[k, 1] span kernel and for square, strided, dilated and padded kernels; a graph's im2col becomes slices
once exported again."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from deployc.graph.unfold import im2col_as_slices, sliced_im2col


@pytest.mark.parametrize(("shape", "kernel", "dilation", "padding", "stride"), [
    ((2, 6, 11, 1), (9, 1), (1, 1), (4, 0), (1, 1)),  # ConvBERT's
    ((1, 3, 8, 7), (3, 3), (1, 1), (0, 0), (1, 1)),
    ((1, 2, 9, 10), (2, 3), (1, 2), (1, 1), (2, 2)),
])
def test_sliced_im2col_equals_unfold(shape: tuple[int, ...], kernel: tuple[int, int], dilation: tuple[int, int],
                                     padding: tuple[int, int], stride: tuple[int, int]) -> None:
    x = torch.randn(*shape)
    expected = F.unfold(x, kernel, dilation=dilation, padding=padding, stride=stride)
    assert torch.equal(sliced_im2col(x, kernel, dilation, padding, stride), expected)


class _Span(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.unfold(x.unsqueeze(-1), kernel_size=[5, 1], padding=[2, 0]).sum(1)


def test_a_graph_s_im2col_becomes_slices() -> None:
    model, x = _Span(), torch.randn(1, 4, 12)
    module = torch.export.export(model, (x,)).module()
    assert any(str(n.target) == "aten.im2col.default" for n in module.graph.nodes)
    assert im2col_as_slices(module) == 1
    again = torch.export.export(module, (x,))
    ops = {str(n.target) for n in again.graph.nodes if n.op == "call_function"}
    assert "aten.im2col.default" not in ops and "aten.slice.Tensor" in ops
    assert torch.equal(again.module()(x), model(x))
