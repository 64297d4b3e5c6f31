"""The `gguf` scheme: a GGUF decoder's weights kept as the file's own blocks, not rounded a second time.

The build's model holds the file's weights dequantized (core/gguf.py). Each linear's blocks of 32 are
recovered from those floats and checked to give them back bit for bit: Q4_1 (`d * q + m`, q in 0..15), Q4_0
(`d * (q - 8)`), Q8_0 (`d * q`, q in -127..127). A linear is then computed as XNNPACK computes a 4-bit
blockwise linear, plus what the 4-bit form leaves out:

    Q4_1:  W x = sum_b d_b (q_b - 8) . x_b  +  sum_b (m_b + 8 d_b) * sum(x_b)
    Q8_0:  q = 16 hi + lo (hi in -8..7, lo in 0..15): W x = 16 d hi . x + d (lo - 8) . x + 8 d * sum(x_b)

The first terms are 4-bit blockwise linears with the file's scales (XNNPACK keeps block scales as bf16: the
one rounding left, measured in docs/benchmarks.md); the block sums' term is a small float linear over the
input's sums per block (a 32nd of the weights). Activations: XNNPACK quantizes a linear's input to int8
per token; that error is what remains (KL 0.03 on SmolLM2's held-out text, 7x llama.cpp's). So the input's
residual, x minus its int8 image (computed here with XNNPACK's formula), goes through the same 4-bit
weights as a second batch row of the same call: ~16-bit activations for twice the multiply-adds, the
weights read once. A decoder's linears of one input (q, k and v; gate and up) are one linear of their stacked
blocks where the blocks are of one kind (`Fused`: on a 6-layer cut of SmolLM2, 12% fewer graph nodes, 23% less
lowering, the same outputs, the same speed), else share the input's residual (`Shared`); all of it is written
in operators XNNPACK delegates, so a layer lowers to a few partitions rather than a partition per operator.

The embedding table (Q8_0) is looked up as int8 codes times its blocks' scales: exact.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from deployc.core.errors import BuildError
from deployc.graph.decoder import MLP, Attention, RMSNorm, share

BLOCK = 32


@dataclass(frozen=True)
class Blocks:
    kind: str  # Q4_1, Q4_0, Q8_0
    codes: torch.Tensor  # int8 [out, in]: q (Q4_1, Q4_0: 0..15), or q (Q8_0: -127..127)
    scale: torch.Tensor  # float32 [out, in / 32], fp16 values
    minimum: torch.Tensor | None  # Q4_1's float minimum per block


def _fp16(x: torch.Tensor) -> torch.Tensor:
    return x.to(torch.float16).to(torch.float32)


def _exact(w: torch.Tensor, codes: torch.Tensor, d: torch.Tensor, m: torch.Tensor | None) -> bool:
    """Do the blocks give back the weight bit for bit, computed as llama.cpp dequantizes (q * d + m, float32)?"""
    got = codes.float() * d[..., None] + (m[..., None] if m is not None else 0.0)
    return bool(torch.equal(got, w))


def recover(w: torch.Tensor) -> Blocks | None:
    """The blocks a dequantized weight [out, in] came from, or None when it is on no block grid."""
    out, inp = w.shape
    if inp % BLOCK:
        return None
    b = w.detach().float().reshape(out, inp // BLOCK, BLOCK)
    lo, hi = b.amin(-1), b.amax(-1)
    d = _fp16((hi - lo) / 15)  # Q4_1: the minimum is code 0, the maximum code 15
    safe = torch.where(d > 0, d, torch.ones_like(d))
    q = torch.clamp(torch.round((b - lo[..., None]) / safe[..., None]), 0, 15)
    if _exact(b, q, d, lo):
        return Blocks("Q4_1", q.to(torch.int8).reshape(out, inp), d, lo)
    amax = b.abs().amax(-1)
    d8 = _fp16(amax / 127)  # Q8_0: the largest magnitude is code +-127
    q8 = torch.clamp(torch.round(b / torch.where(d8 > 0, d8, torch.ones_like(d8))[..., None]), -127, 127)
    if _exact(b, q8, d8, None):
        return Blocks("Q8_0", q8.to(torch.int8).reshape(out, inp), d8, None)
    signed = torch.gather(b, -1, b.abs().argmax(-1, keepdim=True))[..., 0]
    d4 = _fp16(-signed / 8)  # Q4_0: the largest magnitude is code -8 (d may be negative)
    q4 = torch.clamp(torch.round(b / torch.where(d4 != 0, d4, torch.ones_like(d4))[..., None]), -8, 7)
    if _exact(b, q4, d4, None):
        return Blocks("Q4_0", (q4 + 8).to(torch.int8).reshape(out, inp), d4, None)
    return None


def q4_1(w: torch.Tensor) -> Blocks:
    """A float weight [out, in] rounded to Q4_1 blocks as llama.cpp's quantize_row_q4_1 rounds it: per 32
    weights the minimum and (maximum - minimum) / 15, codes from those in float32, both stored as fp16."""
    out, inp = w.shape
    b = w.detach().float().reshape(out, inp // BLOCK, BLOCK)
    lo, hi = b.amin(-1), b.amax(-1)
    d = (hi - lo) / 15
    inverse = torch.where(d != 0, 1 / torch.where(d != 0, d, torch.ones_like(d)), torch.zeros_like(d))
    q = torch.clamp(torch.floor((b - lo[..., None]) * inverse[..., None] + 0.5), 0, 15)
    return Blocks("Q4_1", q.to(torch.int8).reshape(out, inp), _fp16(d), _fp16(lo))


def q8_0(w: torch.Tensor) -> Blocks:
    """A float weight [rows, in] rounded to Q8_0 blocks as llama.cpp's quantize_row_q8_0 rounds it: per 32
    weights the largest magnitude / 127 (stored as fp16), codes rounded half away from zero."""
    out, inp = w.shape
    b = w.detach().float().reshape(out, inp // BLOCK, BLOCK)
    d = b.abs().amax(-1) / 127
    inverse = torch.where(d != 0, 1 / torch.where(d != 0, d, torch.ones_like(d)), torch.zeros_like(d))
    v = b * inverse[..., None]
    q = torch.sign(v) * torch.floor(v.abs() + 0.5)  # C's roundf
    return Blocks("Q8_0", q.to(torch.int8).reshape(out, inp), _fp16(d), None)


def _pool(x: torch.Tensor, pool: Callable[..., torch.Tensor], width: int) -> torch.Tensor:
    """`pool` over each row's features in windows of `width`: [..., rows, in] -> [..., rows, in / width]. Rows
    go in as a [1, 1, rows, in] image (the form XNNPACK delegates with a dynamic row count) and come back
    with -1 for the dynamic dimension."""
    out = pool(x.view(1, 1, -1, x.shape[-1]), (1, width))
    return out.view(*x.shape[:-2], -1, x.shape[-1] // width)


_MAGIC = 12582912.0  # 1.5 * 2**23


def _round(v: torch.Tensor) -> torch.Tensor:
    """v rounded to the nearest integer, ties to even, for |v| < 2**22: adding 1.5 * 2**23 in float32 leaves no
    fraction bits (the "magic bias" XNNPACK's own conversion kernels round with); taking it away gives the
    integer back. Two delegated additions where torch.round is not delegated."""
    return (v + _MAGIC) - _MAGIC


def int8_per_token(x: torch.Tensor) -> torch.Tensor:
    """x's image under XNNPACK's dynamic int8 quantization (per row, asymmetric; measured equal to its
    kernels' to 1e-6 on a lowered program). Written in operators XNNPACK delegates (amax, amin and round it
    does not): a row's extremes as max pooling, rounding as XNNPACK's conversion kernels round."""
    width = x.shape[-1]
    lo = torch.clamp(-_pool(-x, nn.functional.max_pool2d, width), max=0.0)
    hi = torch.clamp(_pool(x, nn.functional.max_pool2d, width), min=0.0)
    scale = torch.clamp((hi - lo) / 255.0, min=torch.finfo(torch.float32).eps)
    zero = torch.clamp(-128 - _round(lo / scale), -128, 127)
    return (torch.clamp(_round(x / scale) + zero, -128, 127) - zero) * scale


def block_means(x: torch.Tensor) -> torch.Tensor:
    """The mean of each block of 32 features, [..., in] -> [..., in / 32], as average pooling (delegated)."""
    return _pool(x, nn.functional.avg_pool2d, BLOCK)


def _four_bit(codes: torch.Tensor, scale: torch.Tensor) -> nn.Linear:
    """A linear XNNPACK lowers to its 4-bit blockwise kernel (qd8 x qb4w): codes -8..7, one scale a block."""
    from torchao.quantization.quantize_.workflows.intx.intx_unpacked_to_int8_tensor import (
        IntxUnpackedToInt8Tensor,
        IntxUnpackedToInt8TensorActivationQuantization,
    )

    out, inp = codes.shape
    linear = nn.Linear(inp, out, bias=False)
    weight = IntxUnpackedToInt8Tensor(codes, scale, torch.zeros_like(scale, dtype=torch.int8),
                                      torch.int4,  # type: ignore[attr-defined]
                                      (1, BLOCK), torch.float32,
                                      IntxUnpackedToInt8TensorActivationQuantization.INT8_ASYM_PER_TOKEN)
    linear.weight = nn.Parameter(weight, requires_grad=False)
    return linear


def _positive(codes: torch.Tensor, scale: torch.Tensor, offset: torch.Tensor
              ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The same values as codes (-8..7) times scale plus offset, a block at a time, with every scale positive
    (XNNPACK refuses others): a negative scale (Q4_0's) takes codes -q - 1 (still -8..7) and its size more
    offset; a zero one (a constant block) codes 0 and scale 1."""
    out, inp = codes.shape
    c = codes.reshape(out, inp // BLOCK, BLOCK).to(torch.int16)
    negative, zero = scale < 0, scale == 0
    c = torch.where(negative[..., None], -c - 1, torch.where(zero[..., None], torch.zeros_like(c), c))
    offset = torch.where(negative, offset - scale, offset)
    scale = torch.where(negative, -scale, torch.where(zero, torch.ones_like(scale), scale))
    return c.reshape(out, inp).to(torch.int8), scale, offset


class BlockLinear(nn.Module):
    """A linear of the file's blocks: 4-bit parts, each block's offset times the input's block sums, and the
    input's int8 residual through the parts again."""

    def __init__(self, blocks: Blocks, residual: bool) -> None:
        super().__init__()
        d = blocks.scale
        if blocks.kind == "Q8_0":
            hi = torch.div(blocks.codes, 16, rounding_mode="floor")
            lo = blocks.codes - 16 * hi
            halves = [_positive(hi, 16 * d, torch.zeros_like(d)), _positive(lo - 8, d, 8 * d)]
        else:
            base = blocks.minimum + 8 * d if blocks.minimum is not None else torch.zeros_like(d)
            halves = [_positive(blocks.codes - 8, d, base)]
        self.parts = nn.ModuleList([_four_bit(codes, scale) for codes, scale, _ in halves])
        offset = sum((o for _, _, o in halves), torch.zeros_like(d))
        # Times 32: the offsets meet the blocks' means (average pooling), not their sums; exact in float.
        self.offset = nn.Parameter(offset * BLOCK, requires_grad=False) if bool(offset.any()) else None
        self.residual = residual

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.given(*prepare(x, self.residual))

    def given(self, rows: torch.Tensor, means: torch.Tensor) -> torch.Tensor:
        """The linear of an input prepared by `prepare` (shared by the linears that read the same input)."""
        y = self.parts[0](rows)
        for part in self.parts[1:]:
            y = y + part(rows)
        if self.residual:  # each output row is the sum of its two rows: twice their average, pooled
            # (slicing the rows apart would leave XNNPACK's partition: it slices no dynamic shape)
            pair = nn.functional.avg_pool2d(y.view(1, 1, 2, -1), (2, 1))
            y = 2 * pair.view(*means.shape[:-2], -1, y.shape[-1])
        if self.offset is not None:
            y = y + nn.functional.linear(means, self.offset)
        return y


def prepare(x: torch.Tensor, residual: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """What a BlockLinear reads of its input: the rows its parts take (with the residual, x and x minus its
    int8 image stacked on the first dimension: one call a part, the weights read once) and the blocks' means."""
    rows = torch.cat([x, x - int8_per_token(x)]) if residual else x
    return rows, block_means(x)


class Shared(nn.Module):
    """Linears of one input (attention's q, k and v; the MLP's gate and up): the input's residual and block
    means computed once for all of them."""

    def __init__(self, linears: list[BlockLinear]) -> None:
        super().__init__()
        self.linears = nn.ModuleList(linears)
        self.residual = linears[0].residual

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        prepared = prepare(x, self.residual)
        return tuple(linear.given(*prepared) for linear in self.linears if isinstance(linear, BlockLinear))


def stacked(blocks: list[Blocks]) -> Blocks | None:
    """The blocks of linears of one input stacked by output, as one linear's; None when their kinds differ."""
    kinds = {b.kind for b in blocks}
    if len(kinds) != 1:
        return None
    minimum = [b.minimum for b in blocks if b.minimum is not None]
    return Blocks(kinds.pop(), torch.cat([b.codes for b in blocks]), torch.cat([b.scale for b in blocks]),
                  torch.cat(minimum) if minimum else None)


class Fused(nn.Module):
    """Linears of one input (q, k and v; gate and up) as one BlockLinear of their stacked blocks: each output
    channel is computed as its own linear computes it, in one call a part instead of one a linear, the pair's
    sum and the blocks' offsets once; the outputs are split after."""

    def __init__(self, blocks: Blocks, sizes: list[int], residual: bool) -> None:
        super().__init__()
        self.linear = BlockLinear(blocks, residual)
        self.sizes = sizes

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        # Each part contiguous: the decoder views them by heads.
        return tuple(part.contiguous() for part in torch.split(self.linear(x), self.sizes, dim=-1))


class ByteEmbedding(nn.Module):
    """A Q8_0 table looked up as int8 codes times the blocks' scales: the file's values, a byte a weight."""

    codes: torch.Tensor
    scales: torch.Tensor

    def __init__(self, blocks: Blocks) -> None:
        super().__init__()
        self.register_buffer("codes", blocks.codes)
        self.register_buffer("scales", blocks.scale)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        codes = nn.functional.embedding(ids, self.codes).float()
        scales = nn.functional.embedding(ids, self.scales)
        shape = codes.shape
        # Views with -1 for the ids' length (a symbolic size keeps XNNPACK from taking the view).
        blocks = codes.view(-1, shape[-1] // BLOCK, BLOCK) * scales.view(-1, shape[-1] // BLOCK, 1)
        return blocks.view(*shape[:-2], -1, shape[-1])


class PooledRMSNorm(nn.Module):
    """RMSNorm with its mean of squares as average pooling: XNNPACK delegates it (its mean only over the two
    last dimensions of a 4-D tensor), so a layer's partition does not end at each norm. The same arithmetic
    up to the order of the sum."""

    def __init__(self, norm: RMSNorm) -> None:
        super().__init__()
        self.eps, self.gemma, self.weight = norm.eps, norm.gemma, norm.weight

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        normed = x * torch.rsqrt(_pool(x * x, nn.functional.avg_pool2d, x.shape[-1]) + self.eps)
        return normed * (1.0 + self.weight) if self.gemma else normed * self.weight


class RotationProduct(nn.Module):
    """rotate_half ([-x2, x1] of each head's halves) as a product with its signed permutation matrix: exact
    (each output is one input, the other products zeros), and a linear XNNPACK delegates, where it delegates
    no slice of a tensor of dynamic length (the halves' slices ended a delegate each)."""

    weight: torch.Tensor

    def __init__(self, head_dim: int) -> None:
        super().__init__()
        half = head_dim // 2
        weight = torch.zeros(head_dim, head_dim)
        weight[torch.arange(half), torch.arange(half) + half] = -1.0
        weight[torch.arange(half) + half, torch.arange(half)] = 1.0
        self.register_buffer("weight", weight)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return nn.functional.linear(x, self.weight)


@dataclass(frozen=True)
class Rounding:
    """What the blocks of a float model's weights are: None keeps a GGUF file's own (a weight on no grid is
    refused); else llama.cpp's Q4_1 for the linears and Q8_0 for the tables (the token embedding, and the
    output layer tied to it), as llama.cpp's converter writes SmolLM2's Q4_1 file."""

    tables: frozenset[int]  # data pointers of the embedding tables' weights


def _blocks(full: str, weight: torch.Tensor, rounding: Rounding | None) -> Blocks:
    if rounding is not None:
        if weight.shape[-1] % BLOCK:
            raise BuildError(f"{full}: {weight.shape[-1]} inputs are not whole blocks of {BLOCK}: the gguf "
                             "scheme needs them; choose another scheme")
        return q8_0(weight) if weight.data_ptr() in rounding.tables else q4_1(weight)
    blocks = recover(weight)
    if blocks is None:
        raise BuildError(f"{full}'s weights are not the blocks of a GGUF file (Q4_0, Q4_1 or Q8_0): "
                         "the gguf scheme keeps a file's blocks; choose another scheme")
    return blocks


def _block_linear(full: str, child: nn.Linear, residual: bool, kinds: dict[str, str],
                  rounding: Rounding | None) -> BlockLinear:
    blocks = _blocks(full, child.weight, rounding)
    kinds[full] = blocks.kind
    return BlockLinear(blocks, residual)


def _one_input(prefix: str, parent: nn.Module, names: tuple[str, ...], residual: bool, kinds: dict[str, str],
               rounding: Rounding | None) -> nn.Module:
    """Linears of one input: `Fused` where their blocks are of one kind, else `Shared`."""
    blocks = [_blocks(prefix + n, getattr(parent, n).weight, rounding) for n in names]
    kinds.update({prefix + n: b.kind for n, b in zip(names, blocks)})
    together = stacked(blocks)
    if together is not None:
        return Fused(together, [b.codes.shape[0] for b in blocks], residual)
    return Shared([BlockLinear(b, residual) for b in blocks])


def keep_blocks(model: nn.Module, residual: bool = True, round_float: bool = False) -> dict[str, str]:
    """Every linear and embedding of the model as its file's blocks; name -> block kind. A weight on no block
    grid (a float tensor of a GGUF file) is refused: for a GGUF file this scheme keeps, it does not quantize.
    `round_float` (a float checkpoint): the weights rounded to blocks as llama.cpp rounds them (`Rounding`).
    A decoder's linears of one input go behind one `Fused` (or `Shared`), and its norms pool (`PooledRMSNorm`)."""
    kinds: dict[str, str] = {}
    rounding = (Rounding(frozenset(m.weight.data_ptr() for m in model.modules() if isinstance(m, nn.Embedding)))
                if round_float else None)
    for parent_name, parent in list(model.named_modules()):
        prefix = f"{parent_name}." if parent_name else ""
        if isinstance(parent, Attention | MLP):
            for names in parent.shared_inputs:
                share(parent, names, _one_input(prefix, parent, names, residual, kinds, rounding))
            if isinstance(parent, Attention):
                parent.rotate = RotationProduct(parent.head_dim)
        for name, child in list(parent.named_children()):
            full = prefix + name
            if isinstance(child, nn.Linear) and child.bias is None:
                setattr(parent, name, _block_linear(full, child, residual, kinds, rounding))
            elif isinstance(child, RMSNorm):
                setattr(parent, name, PooledRMSNorm(child))
            elif isinstance(child, nn.Embedding):
                blocks = (q8_0(child.weight) if rounding is not None and child.weight.shape[-1] % BLOCK == 0
                          else recover(child.weight))
                if blocks is not None and blocks.kind == "Q8_0":
                    setattr(parent, name, ByteEmbedding(blocks))
                    kinds[full] = "Q8_0 table"
    return kinds
