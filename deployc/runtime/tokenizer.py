"""Hugging Face tokenizer.json files, as both the build (index) and `deployc run` use them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np


def load_tokenizer(path: Path, max_length: int | None = None) -> Any:
    from tokenizers import Tokenizer

    tk = Tokenizer.from_file(str(path))
    # Shipped BERT tokenizers pad every text to 128 tokens; our programs take the real length instead.
    tk.no_padding()
    if max_length is not None:
        tk.enable_truncation(max_length)
    else:
        tk.no_truncation()
    return tk


def pad_id(tk: Any) -> int:
    for token in ("[PAD]", "<pad>", "<|pad|>"):
        found = tk.token_to_id(token)
        if found is not None:
            return int(found)
    return 0


def encode(tk: Any, text: str, pad_to: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(input_ids [1, n], attention_mask [1, n]) as int64. With `pad_to`, n is exactly that: the ids
    padded with the tokenizer's pad id and masked out (for programs with a static length, e.g. on an NPU)."""
    enc = tk.encode(text)
    ids, mask = list(enc.ids), list(enc.attention_mask)
    if pad_to:
        ids, mask = ids[:pad_to], mask[:pad_to]
        ids += [pad_id(tk)] * (pad_to - len(ids))
        mask += [0] * (pad_to - len(mask))
    return np.asarray([ids], dtype=np.int64), np.asarray([mask], dtype=np.int64)
