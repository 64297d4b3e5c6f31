"""Llama-family decoders from Hugging Face directories as KV-cache programs.

transformers' own static-cache export does not survive ExecuTorch's decompositions on torch 2.13
("expected compiled_fn to be GraphModule"), so deployc owns the decoder: the same computation as
transformers' Llama, Mistral, Qwen2, Qwen3 and Gemma (SmolLM and TinyLlama are Llama), with the
parameter names of their checkpoints, loaded from the directory's safetensors.

The program has the interface of every deployc text-generation model: forward(tokens[1, T],
input_pos[T]) -> logits of the last position [1, vocab]. One method serves prefill (T = prompt length)
and decode (T = 1). The caches are buffers the program mutates, written with index_copy at input_pos (in
place: the XNNPACK backend runs ExecuTorch's reinplace pass); attention is masked to positions <= input_pos,
so nothing in the graph depends on data.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from deployc.core.errors import BuildError

_ACTIVATIONS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "silu": F.silu, "swish": F.silu, "gelu": F.gelu,
    "gelu_pytorch_tanh": lambda x: F.gelu(x, approximate="tanh"), "gelu_new": lambda x: F.gelu(x, approximate="tanh"),
}


@dataclass(frozen=True)
class DecoderConfig:
    """What of config.json decides the computation."""

    model_type: str
    vocab_size: int
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    eps: float
    activation: str
    rope_theta: float
    rope_scaling: dict[str, Any] | None  # llama3 scaling parameters, or None
    attention_bias: bool  # q, k, v (Qwen2 always; Llama/Mistral when the config says)
    output_bias: bool  # o_proj (Llama's attention_bias covers it too)
    mlp_bias: bool
    qk_norm: bool  # Qwen3: RMSNorm over each head of q and k before the rotation
    gemma: bool  # norms scale by (1 + weight); embeddings scaled by sqrt(hidden)
    tied: bool
    sliding_window: int | None


def read_config(config: dict[str, Any]) -> DecoderConfig:
    from deployc.load.hf_directory import decoder_config_problem

    problem = decoder_config_problem(config)
    if problem:
        raise BuildError(problem)
    kind = config["model_type"]
    heads = int(config["num_attention_heads"])
    hidden = int(config["hidden_size"])
    rope = config.get("rope_parameters") or {}
    scaling = config.get("rope_scaling") or (rope if rope.get("rope_type", "default") != "default" else None)
    llama_attn_bias = bool(config.get("attention_bias", False))
    return DecoderConfig(
        model_type=kind, vocab_size=int(config["vocab_size"]), hidden=hidden, layers=int(config["num_hidden_layers"]),
        heads=heads, kv_heads=int(config.get("num_key_value_heads") or heads),
        head_dim=int(config.get("head_dim") or hidden // heads), intermediate=int(config["intermediate_size"]),
        eps=float(config.get("rms_norm_eps", 1e-6)),
        activation=str(config.get("hidden_activation") or config.get("hidden_act") or "silu"),
        rope_theta=float(rope.get("rope_theta", config.get("rope_theta", 10000.0))),
        rope_scaling=scaling if scaling and scaling.get("rope_type", scaling.get("type")) == "llama3" else None,
        attention_bias=kind == "qwen2" or llama_attn_bias, output_bias=kind != "qwen2" and llama_attn_bias,
        mlp_bias=bool(config.get("mlp_bias", False)), qk_norm=kind == "qwen3", gemma=kind == "gemma",
        tied=bool(config.get("tie_word_embeddings", kind == "gemma")),
        sliding_window=_sliding_window(config))


def _sliding_window(config: dict[str, Any]) -> int | None:
    window = config.get("sliding_window")
    if not isinstance(window, int) or window <= 0:
        return None
    if config.get("model_type") in ("qwen2", "qwen3") and not config.get("use_sliding_window", False):
        return None
    return window


def inverse_frequencies(c: DecoderConfig) -> torch.Tensor:
    inv = 1.0 / (c.rope_theta ** (torch.arange(0, c.head_dim, 2, dtype=torch.int64).float() / c.head_dim))
    if c.rope_scaling is None:
        return inv
    # Llama 3.1's frequency-dependent scaling, as transformers computes it.
    s = c.rope_scaling
    factor, low, high = float(s["factor"]), float(s.get("low_freq_factor", 1.0)), float(s.get("high_freq_factor", 4.0))
    old = float(s.get("original_max_position_embeddings", 8192))
    wavelen = 2 * math.pi / inv
    scaled = torch.where(wavelen > old / low, inv / factor, inv)
    smooth = (old / wavelen - low) / (high - low)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    medium = ~(wavelen < old / high) * ~(wavelen > old / low)
    return torch.where(medium, smoothed, scaled)


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float, gemma: bool) -> None:
        super().__init__()
        self.eps, self.gemma = eps, gemma
        self.weight = nn.Parameter(torch.zeros(dim) if gemma else torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        normed = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return normed * (1.0 + self.weight) if self.gemma else normed * self.weight


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class RotateHalf(nn.Module):
    """rotate_half as a module of the attention, so that a scheme can compute it another way
    (graph/gguf_blocks.py's `RotationProduct`)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return rotate_half(x)


class Attention(nn.Module):
    k_cache: torch.Tensor
    v_cache: torch.Tensor
    q_norm: RMSNorm
    k_norm: RMSNorm

    def __init__(self, c: DecoderConfig, cache_len: int) -> None:
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = c.heads, c.kv_heads, c.head_dim
        self.q_proj = nn.Linear(c.hidden, c.heads * c.head_dim, bias=c.attention_bias)
        self.k_proj = nn.Linear(c.hidden, c.kv_heads * c.head_dim, bias=c.attention_bias)
        self.v_proj = nn.Linear(c.hidden, c.kv_heads * c.head_dim, bias=c.attention_bias)
        self.o_proj = nn.Linear(c.heads * c.head_dim, c.hidden, bias=c.output_bias)
        if c.qk_norm:
            self.q_norm = RMSNorm(c.head_dim, c.eps, False)
            self.k_norm = RMSNorm(c.head_dim, c.eps, False)
        self.qk_norm = c.qk_norm
        self.rotate: nn.Module = RotateHalf()
        # Linears of one input that a quantization may compute together (graph/gguf_blocks.py's Shared).
        self.shared_inputs: tuple[tuple[str, ...], ...] = () if c.attention_bias else (("q_proj", "k_proj", "v_proj"),)
        self.shared: nn.Module | None = None
        shape = (1, c.kv_heads, cache_len, c.head_dim)
        self.register_buffer("k_cache", torch.zeros(shape), persistent=False)
        self.register_buffer("v_cache", torch.zeros(shape), persistent=False)

    def forward(self, x: torch.Tensor, input_pos: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                mask: torch.Tensor) -> torch.Tensor:
        # Every view names the call's length as -1, never x.shape[1]: XNNPACK takes a reshape with one inferred
        # dimension but none with a symbolic size, and each one it leaves splits the layer's delegate.
        heads, kv_heads, head_dim = self.heads, self.kv_heads, self.head_dim
        q, k, v = self.shared(x) if self.shared is not None else (self.q_proj(x), self.k_proj(x), self.v_proj(x))
        q = q.view(1, -1, heads, head_dim)
        k = k.view(1, -1, kv_heads, head_dim)
        v = v.view(1, -1, kv_heads, head_dim).transpose(1, 2)
        if self.qk_norm:  # each head normalised on a 2-D view
            q = self.q_norm(q.reshape(-1, head_dim)).view(1, -1, heads, head_dim)
            k = self.k_norm(k.reshape(-1, head_dim)).view(1, -1, kv_heads, head_dim)
        q, k = q.transpose(1, 2), k.transpose(1, 2)
        q = q * cos + self.rotate(q) * sin
        k = k * cos + self.rotate(k) * sin
        self.k_cache.index_copy_(2, input_pos, k)
        self.v_cache.index_copy_(2, input_pos, v)
        # Grouped-query attention: each cached head serves a group of q heads (heads j*g .. j*g+g-1), whose
        # queries go side by side against it, [kv_heads, g*t, head_dim]; repeating the cache for every q head
        # instead copied all of it each call (a third of SmolLM2's decode step). In memory those rows are the
        # heads' [heads, t] rows, so the scores and outputs are views of them. The products are 3-D bmm: a 4-D
        # matmul exports as expand_copy of its operands, and XNNPACK leaves the caches' copies to portable
        # kernels (SmolLM2: 3.4 ms of a 44 ms decode step). The mask is added (0 or -inf, made once per call):
        # a bool masked_fill per layer stayed on portable kernels too.
        cache_len, g = self.k_cache.shape[2], heads // kv_heads
        keys = self.k_cache.view(kv_heads, cache_len, head_dim)
        scores = torch.bmm(q.reshape(kv_heads, -1, head_dim), keys.transpose(1, 2))
        weights = F.softmax(_per_head(scores, g) / math.sqrt(head_dim) + mask, dim=-1)
        values = self.v_cache.view(kv_heads, cache_len, head_dim)
        out = _per_head(torch.bmm(weights.view(kv_heads, -1, cache_len), values), g)
        return self.o_proj(out.transpose(1, 2).reshape(1, -1, heads * head_dim))


def _per_head(grouped: torch.Tensor, g: int) -> torch.Tensor:
    """[kv_heads, g*t, n] -> [1, kv_heads*g, t, n] in two views: torch.export cannot prove the one-step view
    for every t."""
    kv_heads, _, n = grouped.shape
    return grouped.view(kv_heads, g, -1, n).view(1, kv_heads * g, -1, n)


class MLP(nn.Module):
    def __init__(self, c: DecoderConfig) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(c.hidden, c.intermediate, bias=c.mlp_bias)
        self.up_proj = nn.Linear(c.hidden, c.intermediate, bias=c.mlp_bias)
        self.down_proj = nn.Linear(c.intermediate, c.hidden, bias=c.mlp_bias)
        self.act = _ACTIVATIONS[c.activation]
        self.shared_inputs: tuple[tuple[str, ...], ...] = () if c.mlp_bias else (("gate_proj", "up_proj"),)
        self.shared: nn.Module | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = self.shared(x) if self.shared is not None else (self.gate_proj(x), self.up_proj(x))
        return self.down_proj(self.act(gate) * up)


def share(owner: Attention | MLP, names: tuple[str, ...], module: nn.Module) -> None:
    """Compute the linears `names` (one of the owner's `shared_inputs`) as `module`, which returns their outputs."""
    if names not in owner.shared_inputs:
        raise ValueError(f"{names} are not linears of one input here")
    for name in names:
        delattr(owner, name)
    owner.shared = module


class Layer(nn.Module):
    def __init__(self, c: DecoderConfig, cache_len: int) -> None:
        super().__init__()
        self.input_layernorm = RMSNorm(c.hidden, c.eps, c.gemma)
        self.post_attention_layernorm = RMSNorm(c.hidden, c.eps, c.gemma)
        self.self_attn = Attention(c, cache_len)
        self.mlp = MLP(c)

    def forward(self, x: torch.Tensor, input_pos: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                mask: torch.Tensor) -> torch.Tensor:
        x = x + self.self_attn(self.input_layernorm(x), input_pos, cos, sin, mask)
        return x + self.mlp(self.post_attention_layernorm(x))


class Body(nn.Module):
    """transformers' `model.` prefix: the names below match the checkpoints'."""

    def __init__(self, c: DecoderConfig, cache_len: int) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(c.vocab_size, c.hidden)
        self.layers = nn.ModuleList(Layer(c, cache_len) for _ in range(c.layers))
        self.norm = RMSNorm(c.hidden, c.eps, c.gemma)


class Decoder(nn.Module):
    rope_cos: torch.Tensor
    rope_sin: torch.Tensor
    positions: torch.Tensor

    def __init__(self, c: DecoderConfig, cache_len: int) -> None:
        super().__init__()
        self.config, self.cache_len = c, cache_len
        self.model = Body(c, cache_len)
        self.lm_head = nn.Linear(c.hidden, c.vocab_size, bias=False)
        if c.tied:
            self.lm_head.weight = self.model.embed_tokens.weight
        angles = torch.outer(torch.arange(cache_len).float(), inverse_frequencies(c))
        angles = torch.cat((angles, angles), dim=-1)
        self.register_buffer("rope_cos", angles.cos(), persistent=False)
        self.register_buffer("rope_sin", angles.sin(), persistent=False)
        self.register_buffer("positions", torch.arange(cache_len), persistent=False)
        # Gemma rounds its embedding scale to the weights' dtype; fp32 here.
        self.embed_scale = math.sqrt(c.hidden) if c.gemma else 1.0

    def forward(self, tokens: torch.Tensor, input_pos: torch.Tensor) -> torch.Tensor:
        return self.lm_head(self.model.norm(self._hidden(tokens, input_pos)[:, -1, :]))

    def every_position(self, tokens: torch.Tensor, input_pos: torch.Tensor) -> torch.Tensor:
        """Eager only (never exported): the logits after each of the call's tokens [1, T, vocab], as T calls of
        one token each would give them, in one pass (a held-out window's references: graph/parity.py)."""
        return self.lm_head(self.model.norm(self._hidden(tokens, input_pos)))

    def _hidden(self, tokens: torch.Tensor, input_pos: torch.Tensor) -> torch.Tensor:
        x = self.model.embed_tokens(tokens)
        if self.embed_scale != 1.0:
            x = x * self.embed_scale
        cos, sin = self.rope_cos[input_pos], self.rope_sin[input_pos]
        seen = self.positions.unsqueeze(0) <= input_pos.unsqueeze(1)  # what each query attends to
        mask = torch.where(seen, 0.0, float("-inf")).view(1, 1, -1, self.cache_len)
        for layer in self.model.layers:
            x = layer(x, input_pos, cos, sin, mask)
        return x


def _weights(folder: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    state: dict[str, torch.Tensor] = {}
    for shard in sorted(folder.glob("*.safetensors")):
        state.update(load_file(str(shard)))
    return state


def _checkpoint_names(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Checkpoints of the bare model (saved from LlamaModel) lack the `model.` prefix."""
    out = {}
    for name, tensor in state.items():
        if name.endswith("rotary_emb.inv_freq"):  # older checkpoints store the rotation table; it is recomputed
            continue
        out[name if name.startswith(("model.", "lm_head.")) else f"model.{name}"] = tensor
    return out


def load_decoder(folder: Path, cache_len: int) -> Decoder:
    """The directory's decoder with a KV cache of `cache_len` positions, weights in fp32."""
    return decoder_from_weights(json.loads((folder / "config.json").read_text()), _weights(folder), cache_len,
                                str(folder))


def decoder_from_weights(config: dict[str, Any], weights: dict[str, torch.Tensor], cache_len: int,
                         folder: str) -> Decoder:
    """A decoder of this config and checkpoint (`folder` names where they come from in errors)."""
    c = read_config(config)
    if c.sliding_window is not None and cache_len > c.sliding_window:
        raise BuildError(f"{folder} attends within a sliding window of {c.sliding_window} positions; a context of "
                         f"{cache_len} would attend further than the model was trained to: keep max_seq_len <= "
                         f"{c.sliding_window}")
    model = Decoder(c, cache_len)
    state = {k: v.float() for k, v in _checkpoint_names(weights).items()}
    if c.tied:
        state.pop("lm_head.weight", None)
    expected = set(model.state_dict()) - ({"lm_head.weight"} if c.tied else set())
    missing, unexpected = sorted(expected - set(state)), sorted(set(state) - expected)
    if missing or unexpected:
        what = (f"missing {', '.join(missing[:3])}" if missing else "") + ("; " if missing and unexpected else "") + \
               (f"unexpected {', '.join(unexpected[:3])}" if unexpected else "")
        raise BuildError(f"the weights in {folder} do not fit a {c.model_type} decoder: {what}")
    try:
        model.load_state_dict(state, strict=False)
    except RuntimeError as exc:  # a shape that disagrees with config.json
        first = next(iter(str(exc).strip().splitlines()[1:]), str(exc))
        raise BuildError(f"the weights in {folder} do not fit its config.json: {first.strip()[:300]}") from exc
    return model.eval()
