"""Tokenizer files (Hugging Face tokenizer.json, SentencePiece .model), as both the build (index) and
`deployc run` use them. The native runner's tokenizer.cpp gives the same ids (tested on 520 strings)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np


@dataclass(frozen=True)
class Encoding:
    ids: list[int]
    attention_mask: list[int]


class SentencePieceTokenizer:
    """A SentencePiece model behind the part of `tokenizers.Tokenizer`'s interface the runtime uses.
    Special tokens: the model's bos id first (when it has one), as the native runner does."""

    def __init__(self, path: Path, max_length: int | None) -> None:
        import sentencepiece as spm

        self.sp = spm.SentencePieceProcessor(model_file=str(path))
        self.max_length = max_length

    def encode(self, text: str, add_special_tokens: bool = True) -> Encoding:
        prefix = [self.sp.bos_id()] if add_special_tokens and self.sp.bos_id() >= 0 else []
        body = list(self.sp.encode(text))
        if self.max_length is not None and len(prefix) + len(body) > self.max_length:
            body = body[: max(self.max_length - len(prefix), 0)]
        ids = prefix + body
        return Encoding(ids, [1] * len(ids))

    def decode(self, ids: list[int]) -> str:
        return str(self.sp.decode(list(ids)))

    def token_to_id(self, token: str) -> int | None:
        found = self.sp.piece_to_id(token)
        return None if found == self.sp.unk_id() and token != self.sp.id_to_piece(found) else int(found)


def load_tokenizer(path: Path, max_length: int | None = None) -> Any:
    if path.suffix == ".model":
        return SentencePieceTokenizer(path, max_length)
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
    import numpy as np  # here: the planner tokenizes held-out text without numpy

    enc = tk.encode(text)
    ids, mask = list(enc.ids), list(enc.attention_mask)
    if pad_to:
        ids, mask = ids[:pad_to], mask[:pad_to]
        ids += [pad_id(tk)] * (pad_to - len(ids))
        mask += [0] * (pad_to - len(mask))
    return np.asarray([ids], dtype=np.int64), np.asarray([mask], dtype=np.int64)
