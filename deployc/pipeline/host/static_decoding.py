"""Drives a decoder built in the static form (core/static_decoder.py) as if it were deployc's usual
decoder program, `forward(tokens[1, T], input_pos[T]) -> logits of the last position [1, vocab]`: the
KV caches live here, between calls. A call's tokens go in prefill chunks (the last one padded) and a
single token through the decode method; after each, the new k/v rows are written into the caches at
their positions. Like the program with its cache inside, a call that starts again at position 0
overwrites what was there, and a position sees only the positions before it. A program built with a first
token (layout.prefix_token) answers that token at position 0 from its constant methods, the rows the build
computed in float, and takes no sequence that starts otherwise. What the native runner does too
(native/src/static_decoder.cpp)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from deployc.core.static_decoder import PREFIX_K, PREFIX_LOGITS, PREFIX_V, StaticDecoderLayout

Call = Callable[[str, list[np.ndarray]], Sequence[Any]]  # (method, inputs) -> outputs


class StaticDecoding:
    def __init__(self, layout: StaticDecoderLayout, call: Call) -> None:
        self.layout, self._call = layout, call
        shape = (1, layout.kv_heads, layout.context, layout.head_dim)
        self.k = [np.zeros(shape, dtype=np.float32) for _ in range(layout.layers)]
        self.v = [np.zeros(shape, dtype=np.float32) for _ in range(layout.layers)]
        self._prefix: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None  # k, v, logits: read once

    def forward(self, tokens: Any, input_pos: Any) -> np.ndarray:
        """Logits of the last of the call's positions, [1, vocab]."""
        return self.score(tokens, input_pos)[:, -1, :]

    def score(self, tokens: Any, input_pos: Any) -> np.ndarray:
        """Logits at every one of the call's positions, [1, T, vocab]: text read in prefill chunks."""
        ids = np.asarray(tokens).reshape(-1)
        positions = np.asarray(input_pos).reshape(-1)
        n, context = len(ids), self.layout.context
        if n == 0 or len(positions) != n:
            raise ValueError(f"a decoder call takes tokens [1, T] and input_pos [T] alike; got {n} and "
                             f"{len(positions)}")
        start = int(positions[0])
        if not np.array_equal(positions, np.arange(start, start + n)):
            raise ValueError("input_pos must be consecutive positions")
        if start < 0 or start + n > context:
            raise ValueError(f"positions {start}..{start + n - 1} are beyond the context of {context} the program "
                             "was built for")
        rows = []
        done = 0
        if start == 0 and self.layout.prefix_token >= 0:
            if int(ids[0]) != self.layout.prefix_token:
                raise ValueError(self.layout.refusal(int(ids[0])))
            rows.append(self._first())
            done = 1
        for single, width, take in self.layout.pieces(n - done):
            rows.append(self._run(self.layout.decode_method if single else self.layout.prefill_method, width,
                                  ids[done:done + take], start + done))
            done += take
        return np.concatenate(rows, axis=1)

    def _first(self) -> np.ndarray:
        """Position 0 from the build's float rows: written into slot 0; its logits [1, 1, vocab]."""
        if self._prefix is None:
            k, v, logits = (np.asarray(self._call(m, [])[0], dtype=np.float32) for m in (PREFIX_K, PREFIX_V,
                                                                                          PREFIX_LOGITS))
            self._prefix = k, v, logits
        k, v, logits = self._prefix
        for i in range(self.layout.layers):
            self.k[i][0, :, 0] = k[i]
            self.v[i][0, :, 0] = v[i]
        return logits.reshape(1, 1, -1)

    def _run(self, method: str, width: int, ids: np.ndarray, start: int) -> np.ndarray:
        n, layout = len(ids), self.layout
        context = layout.context
        tokens = np.zeros((1, width), dtype=np.int32)
        tokens[0, :n] = ids
        # Padded rows take the last real position (any position the rotation table has); their rows of
        # logits and k/v are never read.
        positions = np.minimum(np.arange(start, start + width), start + n - 1).astype(np.int32)
        mask = np.full((1, 1, width, context + width), layout.masked_value, dtype=np.float32)
        mask[..., :start] = 0.0  # the slots of earlier positions
        for row in range(width):
            mask[0, 0, row, context:context + min(row, n - 1) + 1] = 0.0  # the call's own tokens up to this one
        outputs = self._call(method, [tokens, positions, mask, *self.k, *self.v])
        logits = np.asarray(outputs[0], dtype=np.float32)
        for i in range(layout.layers):
            self.k[i][:, :, start:start + n] = np.asarray(outputs[1 + i])[:, :, :n]
            self.v[i][:, :, start:start + n] = np.asarray(outputs[1 + layout.layers + i])[:, :, :n]
        return logits[:, :n, :]
