"""ReLU6 as the minimum of a ReLU and 6, for QNN's HTP (Qnn.adapt_model, every scheme).

`nn.ReLU6` (and `nn.Hardtanh(0, top)`) exports as `aten.hardtanh`, which QNN lowers to the HTP's
ReluMinMax. With 16-bit activations that op lost 6.6 dB against the fake-quantized model after the first
expanding convolution of MobileNetV2 (33.3 dB on the emulator where the simulation had 40.0), and 16 more
over the rest of the net (the 16a8w program: 12.6 dB where the simulation had 23.1); the same position
written as a ReLU, then a minimum with the constant 6, matched the simulation (39.9 dB). The same values in
eager: min(max(x, 0), 6)."""

from __future__ import annotations

import torch
from torch import nn


class ReLUMinimum(nn.Module):
    """max(x, 0), then the minimum with `top`: what nn.ReLU6 / nn.Hardtanh(0, top) compute."""

    top: torch.Tensor

    def __init__(self, top: float) -> None:
        super().__init__()
        self.register_buffer("top", torch.tensor(float(top)), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.minimum(torch.relu(x), self.top)


def relu6_as_minimum(model: nn.Module) -> int:
    """Replace each nn.ReLU6 and each nn.Hardtanh from 0 in `model` by a ReLUMinimum; returns how many."""
    replaced = 0
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if isinstance(child, nn.Hardtanh) and child.min_val == 0.0:  # nn.ReLU6 is a Hardtanh(0, 6)
                setattr(parent, name, ReLUMinimum(child.max_val))
                replaced += 1
    return replaced
