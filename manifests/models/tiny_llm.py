"""A small Llama-style decoder with a static KV cache, for the offline RAG example.

The weights are seeded placeholders (the text it writes is gibberish); point the manifest's
`checkpoint` at a state_dict of the same architecture to use real weights.

One method serves prefill and decode: forward(tokens[1, T], input_pos[T]) -> logits of the last
position [1, vocab]. The caches are module buffers that the program mutates; positions are written
with index_copy and attention is masked to positions <= input_pos, so no shape depends on data.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rope_tables(head_dim: int, max_seq_len: int, theta: float = 10000.0) -> tuple[torch.Tensor, torch.Tensor]:
    freqs = 1.0 / (theta ** (torch.arange(0, head_dim, 2).float() / head_dim))
    angles = torch.outer(torch.arange(max_seq_len).float(), freqs)
    return angles.cos(), angles.sin()


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    # x: [1, heads, T, head_dim]; cos/sin: [T, head_dim/2]
    x1, x2 = x[..., 0::2], x[..., 1::2]
    out1 = x1 * cos - x2 * sin
    out2 = x1 * sin + x2 * cos
    return torch.stack((out1, out2), dim=-1).flatten(-2)


class Attention(nn.Module):
    def __init__(self, dim: int, heads: int, max_seq_len: int) -> None:
        super().__init__()
        self.heads, self.head_dim = heads, dim // heads
        self.wq = nn.Linear(dim, dim, bias=False)
        self.wk = nn.Linear(dim, dim, bias=False)
        self.wv = nn.Linear(dim, dim, bias=False)
        self.wo = nn.Linear(dim, dim, bias=False)
        self.register_buffer("k_cache", torch.zeros(1, heads, max_seq_len, self.head_dim), persistent=False)
        self.register_buffer("v_cache", torch.zeros(1, heads, max_seq_len, self.head_dim), persistent=False)

    def forward(self, x: torch.Tensor, input_pos: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                mask: torch.Tensor) -> torch.Tensor:
        t = x.shape[1]
        q = self.wq(x).view(1, t, self.heads, self.head_dim).transpose(1, 2)
        k = self.wk(x).view(1, t, self.heads, self.head_dim).transpose(1, 2)
        v = self.wv(x).view(1, t, self.heads, self.head_dim).transpose(1, 2)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        self.k_cache.index_copy_(2, input_pos, k)
        self.v_cache.index_copy_(2, input_pos, v)
        scores = q @ self.k_cache.transpose(2, 3) / math.sqrt(self.head_dim)
        scores = scores.masked_fill(~mask, float("-inf"))
        out = F.softmax(scores, dim=-1) @ self.v_cache
        return self.wo(out.transpose(1, 2).reshape(1, t, -1))


class Block(nn.Module):
    def __init__(self, dim: int, heads: int, hidden: int, max_seq_len: int) -> None:
        super().__init__()
        self.attn_norm, self.ffn_norm = RMSNorm(dim), RMSNorm(dim)
        self.attn = Attention(dim, heads, max_seq_len)
        self.w1 = nn.Linear(dim, hidden, bias=False)
        self.w2 = nn.Linear(hidden, dim, bias=False)
        self.w3 = nn.Linear(dim, hidden, bias=False)

    def forward(self, x: torch.Tensor, input_pos: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                mask: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.attn_norm(x), input_pos, cos, sin, mask)
        h = self.ffn_norm(x)
        return x + self.w2(F.silu(self.w1(h)) * self.w3(h))


class TinyLlama(nn.Module):
    def __init__(self, vocab_size: int, dim: int, layers: int, heads: int, hidden: int, max_seq_len: int) -> None:
        super().__init__()
        self.max_seq_len = max_seq_len
        self.embed = nn.Embedding(vocab_size, dim)
        self.blocks = nn.ModuleList(Block(dim, heads, hidden, max_seq_len) for _ in range(layers))
        self.norm = RMSNorm(dim)
        self.output = nn.Linear(dim, vocab_size, bias=False)
        cos, sin = rope_tables(dim // heads, max_seq_len)
        self.register_buffer("rope_cos", cos, persistent=False)
        self.register_buffer("rope_sin", sin, persistent=False)
        self.register_buffer("positions", torch.arange(max_seq_len), persistent=False)

    def forward(self, tokens: torch.Tensor, input_pos: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens)
        cos, sin = self.rope_cos[input_pos], self.rope_sin[input_pos]
        mask = (self.positions.unsqueeze(0) <= input_pos.unsqueeze(1)).view(1, 1, -1, self.max_seq_len)
        for block in self.blocks:
            x = block(x, input_pos, cos, sin, mask)
        return self.output(self.norm(x[:, -1, :]))


def build(vocab_size: int = 30522, dim: int = 128, layers: int = 2, heads: int = 4, hidden: int = 256,
          max_seq_len: int = 128) -> nn.Module:
    model = TinyLlama(vocab_size, dim, layers, heads, hidden, max_seq_len)
    with torch.no_grad():  # placeholder weights: seeded by deployc before this factory runs
        for name, p in model.named_parameters():
            if p.dim() >= 2:
                p.normal_(0.0, 0.02 if "embed" not in name else 1.0)
    return model.eval()
