"""The calls a text-generation program is verified with, beyond its verification points.

Greedy parity: eager PyTorch generates from each prompt (the held-out text's, or seeded tokens when the
model has no tokenizer), and the program is fed the same calls (the prompt, then each token eager
chose). Where the program's logits pick the same tokens, its own greedy generation is eager's, token
for token, for that long.

Held-out text: each window is fed one token a call from position 0, as the program decodes, and every
call's logits are a next-token distribution to compare with eager's (deployc/graph/metrics.py). Eager reads
the window in one pass where the model can return every position's logits (deployc's decoders)."""

from __future__ import annotations

from typing import Any

import torch

from deployc.core.static_decoder import SCORE
from deployc.graph.inputs import make_inputs
from deployc.graph.static_decoder import starting_with_prefix
from deployc.plan.build_plan import Export
from deployc.plan.heldout import seeded_prompt_lengths

Call = tuple[str, dict[str, int], list[Any]]  # (method, dims, inputs)


def _prompts(export: Export, generate: int, context: int, seed: int, count: int
             ) -> list[tuple[torch.Tensor, torch.Tensor]]:
    if export.text is not None:
        return [(torch.tensor([p], dtype=torch.int64), torch.arange(len(p), dtype=torch.int64))
                for p in export.text.prompts]
    seq = next(d for d in export.dims if d.name == "seq")
    out = []
    for i, length in enumerate(seeded_prompt_lengths(seq.min, seq.max, context, generate, count)):
        tokens, positions = starting_with_prefix(make_inputs(export.inputs, {"seq": length}, seed + 101 + i),
                                                 export.static)
        out.append((tokens, positions))
    return out


def generation_checks(model: Any, export: Export, generate: int, context: int, seed: int,
                      prompts: int) -> list[tuple[list[Call], list[list[Any]]]]:
    """Per prompt: the calls (prefill, then one decode per chosen token) and eager's outputs of each."""
    out = []
    for tokens, positions in _prompts(export, generate, context, seed, prompts):
        length = tokens.shape[-1]
        calls: list[Call] = [("forward", {"seq": length}, [tokens, positions])]
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


def text_checks(model: Any, export: Export) -> list[tuple[list[Call], list[list[Any]], list[int]]]:
    """Per held-out window: its calls (one token each, from position 0), eager's outputs, and the token
    each call's logits should predict."""
    out = []
    for window in export.text.windows if export.text is not None else []:
        calls: list[Call] = [("forward", {"seq": 1}, [torch.tensor([[t]], dtype=torch.int64),
                                                      torch.tensor([i], dtype=torch.int64)])
                             for i, t in enumerate(window[:-1])]
        with torch.no_grad():
            if hasattr(model, "every_position"):  # deployc's decoders: the window in one pass, 58 ms a token less
                every = model.every_position(torch.tensor([window[:-1]], dtype=torch.int64),
                                             torch.arange(len(window) - 1, dtype=torch.int64))
                refs = [[every[:, i, :].clone()] for i in range(len(calls))]
            else:
                refs = [[model(*inputs).detach().clone()] for _, _, inputs in calls]
        out.append((calls, refs, window[1:]))
    return out


def scored(calls: list[Call], refs: list[list[Any]]) -> tuple[list[Call], list[list[Any]]]:
    """Calls that feed tokens one after another (a held-out window's, or a greedy sequence's: the prompt, then
    each token eager chose) as one `score` call of all their tokens, the reference eager's logits after each
    call [1, calls, vocab]: how a decoder in the static form reads text (its prefill method, in chunks). A
    greedy sequence goes so only where the prefill method is the one graph (npu.decode: prefill)."""
    tokens = torch.cat([inputs[0] for _, _, inputs in calls], dim=1)
    positions = torch.cat([inputs[1] for _, _, inputs in calls])
    return [(SCORE, {"seq": tokens.shape[1]}, [tokens, positions])], [[torch.stack([r[0].reshape(-1) for r in refs])
                                                                       .unsqueeze(0)]]


def leading_matches(reference: list[Any], got: list[Any]) -> int:
    """How many of the sequence's tokens (argmax of eager's logits after each call) agree before the first that
    does not. A call's logits may hold several positions' rows (a `score` call's); eager's rows are its last."""
    n = 0
    for r, g in zip(reference, got):
        rows = r[0].reshape(-1, r[0].shape[-1])
        mine = g[0].reshape(-1, rows.shape[-1])[-rows.shape[0]:]
        for want, have in zip(rows, mine):
            if int(torch.argmax(want)) != int(torch.argmax(have)):
                return n
            n += 1
    return n
