"""Tiny models the tests of deployc's lowering shortcuts lower both ways (with the shortcut and without) in a
fresh process; such a script puts `tests` on its path to import them."""

from __future__ import annotations

import torch
from torch import nn


class Mlp(nn.Module):
    """Two linears with a ReLU between them (which XNNPACK fuses into the first)."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = nn.Linear(8, 16), nn.Linear(16, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.b(torch.relu(self.a(x)))
