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


def frame_tokens(ids: Sequence[int], bos: Sequence[int], prefix: Sequence[int], suffix: Sequence[int]
                 ) -> tuple[int, int]:
    """How many of the prompt's first and last tokens are its frame: bos and the prefix's tokens where the
    prompt starts with them, the suffix's where it ends with them (a message that merges with the frame's
    edge into one token leaves that side to the message)."""
    ids = list(ids)
    head = list(bos) + list(prefix)
    first = len(head) if ids[:len(head)] == head else len(bos)
    last = len(suffix) if suffix and ids[len(ids) - len(suffix):] == list(suffix) else 0
    return first, last


def fit_prompt(ids: Sequence[int], room: int, head: int = 0, tail: int = 0) -> list[int]:
    """The prompt as the decoder takes it: whole when it fits in `room` tokens; else its first `head` tokens
    (bos and the chat template's prefix: the frame the model was tuned on, which a cut from the front would
    lose) and its last ones (the template's `tail`, the message's end), the message cut in between. When the
    frame alone leaves no room for the message, the last tokens."""
    ids = list(ids)
    if len(ids) <= room:
        return ids
    if head + tail < room:
        return ids[:head] + ids[len(ids) - (room - head):]
    return ids[len(ids) - room:]


def generate(step: Step, prompt: Sequence[int], max_new_tokens: int, max_seq_len: int,
             eos_ids: Sequence[int] = (), temperature: float = 0.0, top_p: float = 1.0, seed: int = 0,
             stop: Callable[[list[int]], bool] | None = None, frame: tuple[int, int] = (0, 0)) -> list[int]:
    """New token ids (eos excluded). A prompt that would not leave room keeps its frame (`fit_prompt`: the
    tokens of bos and the template's prefix, and of its suffix) and the message's last tokens."""
    prompt = fit_prompt(prompt, prompt_room(max_new_tokens, max_seq_len), *frame)
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
