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


def encode(tk: Any, text: str) -> tuple[np.ndarray, np.ndarray]:
    """(input_ids [1, n], attention_mask [1, n]) as int64."""
    enc = tk.encode(text)
    return (np.asarray([enc.ids], dtype=np.int64), np.asarray([enc.attention_mask], dtype=np.int64))
