"""The files of a bundle that pipeline ops read on this host, relative to one folder (a bundle, or a conformance
vector's), each loaded once: tokenizers and vector indexes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from deployc.pipeline.host.tokenizers import load_tokenizer


class BundleFiles:
    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self._tokenizers: dict[tuple[str, int | None], Any] = {}
        self._indexes: dict[str, tuple[dict[str, Any], Any]] = {}

    def tokenizer(self, file: str, max_length: int | None) -> Any:
        key = (file, max_length)
        if key not in self._tokenizers:
            self._tokenizers[key] = load_tokenizer(self.folder / file, max_length)
        return self._tokenizers[key]

    def index(self, file: str) -> tuple[dict[str, Any], Any]:
        """The index's JSON (chunks, count, dim) and its vectors, [count, dim] float32 (the .f32 beside it)."""
        import numpy as np

        if file not in self._indexes:
            meta = json.loads((self.folder / file).read_text())
            raw = np.fromfile(self.folder / Path(file).parent / meta["vectors"], dtype="<f4")
            self._indexes[file] = (meta, raw.reshape(meta["count"], meta["dim"]))
        return self._indexes[file]
