"""Rewrites of a loaded model's modules that keep its values and give the HTP a form it computes right
(Qnn.adapt_model; the measurements behind each: docs/qnn.md, "What deployc rewrites for the HTP")."""

from __future__ import annotations

import functools
from typing import Any


def separate_in_projections(model: Any) -> None:
    """Give each nn.MultiheadAttention's q, k and v projections their own slices of its packed matrix (the
    form torch takes when the embedding sizes differ). Why: the HTP fused the packed projection, reshape
    and transpose and failed to prepare it in fp16 (docs/qnn.md, rewrites)."""
    import torch

    for module in model.modules():
        if not isinstance(module, torch.nn.MultiheadAttention) or not module._qkv_same_embed_dim:
            continue
        packed = module.in_proj_weight
        assert packed is not None
        for name, part in zip(("q_proj_weight", "k_proj_weight", "v_proj_weight"), packed.detach().chunk(3)):
            module.register_parameter(name, torch.nn.Parameter(part.clone(), requires_grad=packed.requires_grad))
        module.register_parameter("in_proj_weight", None)
        module._qkv_same_embed_dim = False


def batch_norm_eps_in_variance(model: Any) -> int:
    """Move each batch norm's epsilon into its running variance (variance + eps, eps 0: the same divisor);
    returns how many. Why: QNN's BatchNorm builder uses its own epsilon, never the node's (docs/qnn.md, rewrites)."""
    import torch

    moved = 0
    for module in model.modules():
        if isinstance(module, torch.nn.modules.batchnorm._BatchNorm) and module.running_var is not None \
                and not module.training and module.eps > 0:
            with torch.no_grad():
                module.running_var.add_(module.eps)
            module.eps = 0.0
            moved += 1
    return moved


def one_group_as_layer_norm(model: Any) -> int:
    """Replace each nn.GroupNorm(1, C) in `model` by the LayerNorm it is; returns how many. Why: the HTP's
    16-bit GroupNorm came out uncorrelated with eager (docs/qnn.md, rewrites)."""
    import torch

    return _replace_modules(model, lambda m: type(m) is torch.nn.GroupNorm and m.num_groups == 1,
                            _one_group_norm())


def relu6_as_minimum(model: Any) -> int:
    """Replace each nn.ReLU6 and nn.Hardtanh from 0 in `model` by max(x, 0) then the minimum with its top;
    returns how many. Why: the HTP's ReluMinMax loses precision with 16-bit activations (docs/qnn.md, rewrites). A clamp
    in the model's code is no module: `graph_rewrites.clamps_as_relu_minimum`."""
    import torch

    return _replace_modules(model, lambda m: isinstance(m, torch.nn.Hardtanh) and m.min_val == 0.0,
                            _relu_minimum())  # nn.ReLU6 is a Hardtanh(0, 6)


def strided_nine_by_nine_convs_widened(model: Any) -> int:
    """Replace each nn.Conv2d of a 9 x 9 kernel at stride 2 (no dilation, zero padding) by the 11 x 11 one
    with a ring of zero weights and a pixel more padding; returns how many. Why: the HTP's fp16
    convolution of that one shape put out noise (docs/qnn.md, rewrites). Costs it 49% more multiplications."""
    import torch

    def chosen(m: Any) -> bool:
        return (type(m) is torch.nn.Conv2d and m.kernel_size == (9, 9) and m.stride == (2, 2)
                and m.dilation == (1, 1) and m.padding_mode == "zeros" and isinstance(m.padding, tuple))

    return _replace_modules(model, chosen, _widened)


def _widened(conv: Any) -> Any:
    import torch

    padding = tuple(p + 1 for p in conv.padding)
    wide = torch.nn.Conv2d(conv.in_channels, conv.out_channels, 11, stride=2, padding=padding, groups=conv.groups,
                           bias=conv.bias is not None, device=conv.weight.device, dtype=conv.weight.dtype)
    with torch.no_grad():
        wide.weight.copy_(torch.nn.functional.pad(conv.weight, (1, 1, 1, 1)))
        if wide.bias is not None:
            wide.bias.copy_(conv.bias)
    wide.train(conv.training)
    return wide


def _replace_modules(model: Any, chosen: Any, replacement: Any) -> int:
    replaced = 0
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if chosen(child):
                setattr(parent, name, replacement(child))
                replaced += 1
    return replaced


@functools.cache
def _one_group_norm() -> type:
    import torch

    class OneGroupNorm(torch.nn.Module):
        """nn.GroupNorm(1, C) as a LayerNorm, holding the GroupNorm's own parameters."""

        def __init__(self, norm: Any) -> None:
            super().__init__()
            self.eps, self.weight, self.bias = norm.eps, norm.weight, norm.bias

        def forward(self, x: Any) -> Any:
            shape = x.shape[1:]
            per_channel = (-1,) + (1,) * (x.dim() - 2)
            weight = None if self.weight is None else self.weight.reshape(per_channel).expand(shape)
            bias = None if self.bias is None else self.bias.reshape(per_channel).expand(shape)
            return torch.nn.functional.layer_norm(x, shape, weight, bias, self.eps)

    return OneGroupNorm


@functools.cache
def _relu_minimum() -> type:
    import torch

    class ReLUMinimum(torch.nn.Module):
        """max(x, 0), then the minimum with the Hardtanh's top: what nn.ReLU6 / nn.Hardtanh(0, top) compute."""

        top: Any

        def __init__(self, hardtanh: Any) -> None:
            super().__init__()
            self.register_buffer("top", torch.tensor(float(hardtanh.max_val)), persistent=False)

        def forward(self, x: Any) -> Any:
            return torch.minimum(torch.relu(x), self.top)

    return ReLUMinimum


def tied_tables_untied(model: Any) -> int:
    """Give each linear whose weight is an embedding table's (a decoder's tied output layer) its own copy;
    returns how many. Why: QNN's pass that lowers blocked-4-bit programs' linears as 1x1 convolutions
    reshapes the shared weight under the table's gather too, and fails ("expected stride to be a single
    integer value"). The program holds the table twice either way (the gather's and the linear's own
    quantization of it)."""
    import torch

    tables = {id(m.weight) for m in model.modules() if isinstance(m, torch.nn.Embedding)}
    untied = 0
    for module in model.modules():
        if isinstance(module, torch.nn.Linear) and id(module.weight) in tables:
            module.weight = torch.nn.Parameter(module.weight.detach().clone(), requires_grad=False)
            untied += 1
    return untied
