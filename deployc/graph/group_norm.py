"""A GroupNorm of one group as the LayerNorm it is, for QNN's HTP (Qnn.adapt_model, every scheme).

A GroupNorm of one group normalizes each sample over all of its channels and positions: a LayerNorm over
every dim but the batch, with the per-channel scale and shift broadcast over the positions; the same
numbers in eager. The HTP's 16-bit GroupNorm came out uncorrelated with eager (cosine 0.25) at the second
of the two norms in one of MobileViT v2's transformer layers (its input a residual sum), where the
fake-quantized model matched; the same norm written as a LayerNorm matched it (26.5 dB). The HTP's
LayerNorm is the one every transformer here verifies with."""

from __future__ import annotations

import torch
from torch import nn


class OneGroupNorm(nn.Module):
    """nn.GroupNorm(1, C) as a LayerNorm, holding the GroupNorm's own parameters."""

    def __init__(self, norm: nn.GroupNorm) -> None:
        super().__init__()
        self.eps, self.weight, self.bias = norm.eps, norm.weight, norm.bias

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape[1:]
        per_channel = (-1,) + (1,) * (x.dim() - 2)
        weight = None if self.weight is None else self.weight.reshape(per_channel).expand(shape)
        bias = None if self.bias is None else self.bias.reshape(per_channel).expand(shape)
        return nn.functional.layer_norm(x, shape, weight, bias, self.eps)


def one_group_as_layer_norm(model: nn.Module) -> int:
    """Replace each nn.GroupNorm(1, C) in `model` by an OneGroupNorm; returns how many."""
    replaced = 0
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if type(child) is nn.GroupNorm and child.num_groups == 1:
                setattr(parent, name, OneGroupNorm(child))
                replaced += 1
    return replaced
