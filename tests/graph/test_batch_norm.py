"""Inference batch norms over a linear layer's outputs folded into it (graph/batch_norm.py): LeViT's
MLPLayerWithBN and classifier, whose batch norms QNN's HTP computed wrongly with 16-bit activations."""

from __future__ import annotations

import torch
from helpers import testnets

from deployc.graph import batch_norm


def _export(model: torch.nn.Module, x: torch.Tensor) -> torch.fx.GraphModule:
    return torch.export.export(model, (x,)).module()


def _norms(module: torch.fx.GraphModule) -> int:
    return sum(str(n.target) == "aten.batch_norm.default" for n in module.graph.nodes)


def test_a_batch_norm_after_a_linear_is_folded_into_its_weight_and_bias() -> None:
    model, x = testnets.linear_batch_norm(), torch.rand(2, 6, 32) * 2 - 1
    module = _export(model, x)
    assert _norms(module) == 3
    assert batch_norm.fold_into_linears(module) == 3  # two over a linear's outputs, one over the head's inputs
    assert _norms(module) == 0
    torch.testing.assert_close(module(x), model(x), atol=1e-5, rtol=1e-5)
    names = {n for n, _ in module.named_parameters()} | {n for n, _ in module.named_buffers()}
    assert not {"up.weight", "norm_up.running_mean", "norm_down.weight", "head.bias"} & names  # read by nothing now
    assert batch_norm.fold_into_linears(module) == 0


class _LinearReadTwice(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear, self.norm = torch.nn.Linear(8, 8), torch.nn.BatchNorm1d(8).eval()
        self.norm.running_mean.fill_(0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.linear(x)
        return self.norm(h) + h  # the linear's own output is read too: folding would change it


class _ChannelsFirst(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear, self.norm = torch.nn.Linear(8, 8), torch.nn.BatchNorm1d(4).eval()
        self.norm.running_mean.fill_(0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(self.linear(x))  # [1, 4, 8]: normalises dim 1, not the linear's features


def test_a_batch_norm_is_left_where_folding_would_change_another_value() -> None:
    for model, x in ((_LinearReadTwice().eval(), torch.rand(3, 8)), (_ChannelsFirst().eval(), torch.rand(1, 4, 8))):
        module = _export(model, x)
        assert batch_norm.fold_into_linears(module) == 0
        assert _norms(module) == 1
        torch.testing.assert_close(module(x), model(x))
