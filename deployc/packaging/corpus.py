"""Split a corpus into overlapping word windows: the passages a vector index holds. Pure."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Chunk:
    id: int
    source: str  # file path relative to the manifest's folder
    text: str


def chunk_text(text: str, words: int, overlap: int) -> list[str]:
    tokens = text.split()
    if not tokens:
        return []
    step = max(1, words - overlap)
    out = []
    for start in range(0, len(tokens), step):
        out.append(" ".join(tokens[start:start + words]))
        if start + words >= len(tokens):
            break
    return out


def chunk_corpus(files: list[Path], folder: Path, words: int, overlap: int) -> list[Chunk]:
    chunks: list[Chunk] = []
    for f in files:
        rel = f.relative_to(folder).as_posix()
        for piece in chunk_text(f.read_text(encoding="utf-8"), words, overlap):
            chunks.append(Chunk(len(chunks), rel, piece))
    return chunks
