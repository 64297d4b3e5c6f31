"""T5-style relative position buckets as constants when the lengths are static.

T5 (and mt5, umt5, switch_transformers, ...), MPNet and WavLM compute each attention bias from a bucket index:
arange, subtract, abs, log of the distance, clamp, where. At a static length all of it is a constant,
but exported as is it reaches the backend as int64 arithmetic and a log of zero (the distance of a
token to itself): quantized, the observer records -inf and QNN refuses the graph ("Output def has a bad
scale" on an ElementWiseLog; MPNet's int64 negation has no HTP kernel: "Unsupported input/output
datatypes ... ElementWiseNeg"). Here the bucket of every distance is computed once, eagerly, by the
model's own `_relative_position_bucket`, and a static call looks its indices up: the exported graph
keeps only the embedding lookup of a constant index, and the bias is the same tensor eager computes.
Calls with symbolic lengths (dynamic dims on the CPU) keep the model's own code.
"""

from __future__ import annotations

import inspect
from typing import Any

import torch

_SIGNATURE = ["query_length", "key_length", "device", "past_seen_tokens"]


def _is_t5_style(module: torch.nn.Module) -> bool:
    compute = getattr(module, "compute_bias", None)
    reach, buckets = (getattr(module, n, None) for n in ("relative_attention_max_distance",
                                                           "relative_attention_num_buckets"))
    return bool(isinstance(getattr(module, "relative_attention_bias", None), torch.nn.Embedding)
                and callable(getattr(module, "_relative_position_bucket", None)) and callable(compute)
                and list(inspect.signature(compute).parameters) == _SIGNATURE
                # the saturation below holds when the exact range (half the buckets, or a quarter) ends first
                and isinstance(reach, int) and isinstance(buckets, int) and reach >= buckets)


def _table(bucket: Any, reach: int, **kw: Any) -> list[int]:
    """The bucket of every distance in [-reach, reach]. Every bucket saturates at max_distance (the log
    term reaches the bucket count and is clamped), so distances beyond it share the bucket at +-reach."""
    return list(bucket(torch.arange(-reach, reach + 1), max_distance=reach, **kw).tolist())


def _buckets(table: list[int], reach: int, query_length: int, key_length: int, past: int, device: Any) -> Any:
    rows = [[table[min(max(k - q - past, -reach), reach) + reach] for k in range(key_length)]
            for q in range(query_length)]
    return torch.tensor(rows, dtype=torch.long, device=device)


def _static_compute_bias(module: Any) -> Any:
    reach: int = module.relative_attention_max_distance
    table = _table(module._relative_position_bucket, reach, bidirectional=not module.is_decoder,
                   num_buckets=module.relative_attention_num_buckets)
    original = module.compute_bias

    def compute_bias(query_length: Any, key_length: Any, device: Any = None, past_seen_tokens: Any = 0) -> Any:
        if not all(isinstance(v, int) for v in (query_length, key_length, past_seen_tokens)):
            return original(query_length, key_length, device, past_seen_tokens)
        weight = module.relative_attention_bias.weight
        buckets = _buckets(table, reach, query_length, key_length, past_seen_tokens,
                           device if device is not None else weight.device)
        return module.relative_attention_bias(buckets).permute([2, 0, 1]).unsqueeze(0)

    return compute_bias


def _is_mpnet_style(module: torch.nn.Module) -> bool:
    compute = getattr(module, "compute_position_bias", None)
    bucket = getattr(module, "relative_position_bucket", None)
    return bool(isinstance(getattr(module, "relative_attention_bias", None), torch.nn.Embedding)
                and callable(compute) and callable(bucket)
                and list(inspect.signature(compute).parameters) == ["x", "position_ids", "num_buckets"]
                and list(inspect.signature(bucket).parameters) == ["relative_position", "num_buckets",
                                                                    "max_distance"]
                and inspect.signature(bucket).parameters["max_distance"].default
                >= inspect.signature(compute).parameters["num_buckets"].default)


def _static_position_bias(module: Any) -> Any:
    original = module.compute_position_bias
    buckets_default = inspect.signature(original).parameters["num_buckets"].default
    reach = inspect.signature(module.relative_position_bucket).parameters["max_distance"].default
    table = _table(module.relative_position_bucket, reach, num_buckets=buckets_default)

    def compute_position_bias(x: Any, position_ids: Any = None, num_buckets: Any = buckets_default) -> Any:
        length = x.size(1)
        if position_ids is not None or num_buckets != buckets_default or not isinstance(length, int):
            return original(x, position_ids, num_buckets)
        values = module.relative_attention_bias(_buckets(table, reach, length, length, 0, x.device))
        return values.permute([2, 0, 1]).unsqueeze(0).expand((x.size(0), -1, length, length)).contiguous()

    return compute_position_bias


def _is_wavlm_style(module: torch.nn.Module) -> bool:
    compute = getattr(module, "compute_bias", None)
    return bool(isinstance(getattr(module, "rel_attn_embed", None), torch.nn.Embedding)
                and callable(getattr(module, "_relative_positions_bucket", None)) and callable(compute)
                and list(inspect.signature(compute).parameters) == ["query_length", "key_length"]
                and isinstance(getattr(module, "max_distance", None), int))


def _static_wavlm_bias(module: Any) -> Any:
    """WavLM's gated relative-position bias: its buckets saturate at `max_distance` (the log term reaches
    the bucket count and is capped), like T5's."""
    reach: int = module.max_distance
    table = list(module._relative_positions_bucket(torch.arange(-reach, reach + 1)[None, :]).reshape(-1).tolist())
    original = module.compute_bias

    def compute_bias(query_length: Any, key_length: Any) -> Any:
        if not all(isinstance(v, int) for v in (query_length, key_length)):
            return original(query_length, key_length)
        weight = module.rel_attn_embed.weight
        buckets = _buckets(table, reach, query_length, key_length, 0, weight.device)
        return module.rel_attn_embed(buckets).permute([2, 0, 1])

    return compute_bias


def constant_position_buckets(model: torch.nn.Module) -> int:
    """Rewrite every T5-, MPNet- and WavLM-style position bias of the model; returns how many were
    rewritten."""
    rewritten = 0
    for module in model.modules():
        if _is_t5_style(module):
            module.compute_bias = _static_compute_bias(module)
            rewritten += 1
        elif _is_mpnet_style(module):
            module.compute_position_bias = _static_position_bias(module)
            rewritten += 1
        elif _is_wavlm_style(module):
            module.compute_bias = _static_wavlm_bias(module)
            rewritten += 1
    return rewritten
