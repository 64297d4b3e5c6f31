"""Greedy-token parity for text-generation programs: eager PyTorch generates from fixed prompts, and the
program is fed the same calls (the prompt, then each token eager chose). Where the program's logits pick
the same tokens, its own greedy generation is eager's, token for token, for that long."""

from __future__ import annotations

from typing import Any

import torch

from deployc.graph.inputs import make_inputs
from deployc.plan.build_plan import Export

# Prompt lengths, clamped to what the seq dim and the KV cache allow.
PROMPT_LENGTHS = (5, 12)


def prompt_lengths(export: Export, generate: int, context: int) -> list[int]:
    seq = next(d for d in export.dims if d.name == "seq")
    top = min(seq.max, context - generate)
    return sorted({min(max(n, seq.min), top) for n in PROMPT_LENGTHS}) if top >= seq.min else []


def generation_checks(model: Any, export: Export, generate: int, context: int,
                      seed: int) -> list[tuple[list[tuple[str, dict[str, int], list[Any]]], list[list[Any]]]]:
    """Per prompt: the calls (prefill, then one decode per chosen token) and eager's outputs of each."""
    out = []
    for i, length in enumerate(prompt_lengths(export, generate, context)):
        tokens, positions = make_inputs(export.inputs, {"seq": length}, seed + 101 + i)
        calls: list[tuple[str, dict[str, int], list[Any]]] = [("forward", {"seq": length}, [tokens, positions])]
        refs: list[list[Any]] = []
        with torch.no_grad():
            for step in range(generate):
                logits = model(*calls[-1][2])
                refs.append([logits.detach().clone()])
                if step + 1 < generate:
                    chosen = torch.argmax(logits.reshape(-1)).reshape(1, 1).to(tokens.dtype)
                    at = torch.tensor([length + step], dtype=positions.dtype)
                    calls.append(("forward", {"seq": 1}, [chosen, at]))
        out.append((calls, refs))
    return out


def leading_matches(reference: list[Any], got: list[Any]) -> int:
    """How many of the sequence's tokens (argmax of each call's logits) agree before the first that does not."""
    n = 0
    for r, g in zip(reference, got):
        if int(torch.argmax(r[0].reshape(-1))) != int(torch.argmax(g[0].reshape(-1))):
            break
        n += 1
    return n
