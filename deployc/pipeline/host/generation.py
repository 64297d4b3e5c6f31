"""Autoregressive decoding over a `forward(tokens[1, T], input_pos[T]) -> logits[1, vocab]` step function:
prefill the prompt in one call, then one call per new token. Greedy at temperature 0; otherwise
temperature + top-p sampling from a seeded generator. The same loop drives a built program and the
eager model, which is how parity is tested."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

Step = Callable[[np.ndarray, np.ndarray], np.ndarray]


def choose(logits: np.ndarray, temperature: float, top_p: float, rng: np.random.Generator) -> int:
    logits = np.asarray(logits, dtype=np.float64).reshape(-1)
    if temperature <= 0.0:
        return int(np.argmax(logits))
    scaled = (logits - logits.max()) / temperature
    probs = np.exp(scaled)
    probs /= probs.sum()
    ranked = np.argsort(-probs, kind="stable")
    cumulative = np.cumsum(probs[ranked])
    keep = ranked[: int(np.searchsorted(cumulative, top_p) + 1)]
    p = probs[keep] / probs[keep].sum()
    return int(rng.choice(keep, p=p))


def prompt_room(max_new_tokens: int, max_seq_len: int) -> int:
    """How many prompt tokens are kept (the last ones): the context minus room for the answer, at least 1."""
    return max_seq_len - max_new_tokens if max_new_tokens < max_seq_len else 1


def generate(step: Step, prompt: Sequence[int], max_new_tokens: int, max_seq_len: int,
             eos_ids: Sequence[int] = (), temperature: float = 0.0, top_p: float = 1.0, seed: int = 0,
             stop: Callable[[list[int]], bool] | None = None) -> list[int]:
    """New token ids (eos excluded). The prompt keeps its last tokens when it would not leave room."""
    prompt = list(prompt)[-prompt_room(max_new_tokens, max_seq_len):]
    rng = np.random.default_rng(seed)
    logits = step(np.asarray([prompt], dtype=np.int64), np.arange(len(prompt), dtype=np.int64))
    out: list[int] = []
    pos = len(prompt)
    while len(out) < max_new_tokens and pos < max_seq_len:
        token = choose(logits, temperature, top_p, rng)
        if token in eos_ids:
            break
        out.append(token)
        if stop is not None and stop(out):
            break
        logits = step(np.asarray([[token]], dtype=np.int64), np.asarray([pos], dtype=np.int64))
        pos += 1
    return out
