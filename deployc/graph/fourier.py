"""The real part of a Fourier transform of a real tensor, written as matrix products with cosine and sine
tables: the same values, in ops every backend has. FNet mixes its tokens with `torch.fft.fftn(x, dim=(1,
2)).real`; the FFT exports as `aten.fft_fftn` on complex64 tensors, which no ExecuTorch backend lowers
(not in the Core ATen opset; QNN: "KeyError: torch.complex64"), so FNet had no program on any unit.

Along one axis of length n the DFT matrix is F = C - iS, with C[j, k] = cos(2 pi jk / n) and S[j, k] =
sin(2 pi jk / n) (both symmetric). Carrying a (real, imaginary) pair through each transformed axis:
(C - iS)(re + i im) = (C re + S im) + i(C im - S re). The tables are built in the graph from the axis'
length (jk taken mod n first, so the angle stays under 2 pi), so a dynamic axis keeps its range; at a
static length they are constants, which lowering folds."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch

# The FFTs rewritten where the input is real and only the real part is read.
_FFTS = {"aten.fft_fftn.default", "aten.fft_fft2.default", "aten.fft_fft.default"}
_REAL = "aten.real.default"


def _tables(n: torch.SymInt | int, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(cos, sin, n as a one-element tensor). The length is taken as a tensor from the arange: Python
    arithmetic on a dynamic length (a SymFloat) is not an edge-dialect op (to_edge's verifier refused it)."""
    k = torch.arange(n)  # type: ignore[arg-type]  # a SymInt under export; torch's stubs say int
    length = k[-1:] + 1
    angle = ((k[:, None] * k[None, :]) % length).to(dtype) * (2 * math.pi) / length.to(dtype)
    return torch.cos(angle), torch.sin(angle), length.to(dtype)


def _along(x: torch.Tensor, table: torch.Tensor, axis: int) -> torch.Tensor:
    return torch.matmul(x.movedim(axis, -1), table).movedim(-1, axis)


def real_dft(x: torch.Tensor, dims: Sequence[int], norm: str | None = None) -> torch.Tensor:
    """`torch.fft.fftn(x, dim=dims, norm=norm).real` for a real `x`."""
    re, im = x, None
    for axis in dims:
        cos, sin, length = _tables(x.shape[axis], x.dtype)
        if im is None:  # a real input: its imaginary part is zero
            re, im = _along(re, cos, axis), -_along(re, sin, axis)
        else:
            re, im = _along(re, cos, axis) + _along(im, sin, axis), _along(im, cos, axis) - _along(re, sin, axis)
        if norm in ("forward", "ortho"):
            scale = 1.0 / length if norm == "forward" else torch.rsqrt(length)
            re, im = re * scale, im * scale
    return re


def _axes(node: torch.fx.Node, rank: int) -> tuple[list[int], str | None] | None:
    """(the transformed axes, the norm) of an FFT node, or None when it pads or crops (`s` or `n` given)."""
    op = str(node.target)
    size = "n" if op == "aten.fft_fft.default" else "s"
    args: dict[str, Any] = {**dict(zip(("input", size, "dim", "norm"), node.args)), **node.kwargs}
    if args.get(size) is not None:
        return None
    dim = args.get("dim")
    if op == "aten.fft_fft.default":
        dim = [-1 if dim is None else dim]
    elif dim is None:
        dim = [-2, -1] if op == "aten.fft_fft2.default" else list(range(rank))
    return [int(d) % rank for d in dim], args.get("norm")


def has_real_fft(graph: torch.fx.Graph) -> bool:
    return any(str(node.target) in _FFTS for node in graph.nodes)


def real_ffts_as_matmuls(model: torch.fx.GraphModule) -> int:
    """Make each FFT of a real float tensor whose only readers take its real part call real_dft, those
    readers reading it directly; returns how many. The module must be exported again (graph/export.py)."""
    replaced = 0
    for node in list(model.graph.nodes):
        if str(node.target) not in _FFTS or not isinstance(node.args[0], torch.fx.Node):
            continue
        value = node.args[0].meta.get("val")
        if not isinstance(value, torch.Tensor) or not value.dtype.is_floating_point:
            continue
        axes = _axes(node, value.dim())
        readers = list(node.users)
        if axes is None or not readers or any(str(r.target) != _REAL for r in readers):
            continue
        with model.graph.inserting_before(node):
            real = model.graph.call_function(real_dft, (node.args[0], *axes))
        for reader in readers:
            reader.replace_all_uses_with(real)
            model.graph.erase_node(reader)
        model.graph.erase_node(node)
        replaced += 1
    if replaced:
        model.recompile()
    return replaced
