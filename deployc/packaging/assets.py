"""A target's pipeline assets: tokenizer files and vector indexes (built once per content key, cached).

An index embeds every corpus chunk with the target's built embedding program through the ExecuTorch
runtime, in a child process, so that on-device query embeddings and indexed vectors agree.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from deployc.build import UnitResult
from deployc.cache import Cache
from deployc.errors import BuildError
from deployc.fingerprint import file_sha256, key_of
from deployc.graph.corpus import chunk_corpus
from deployc.graph.pipeline import corpus_files, tokenizer_file
from deployc.manifest import IndexAsset, Manifest
from deployc.project import Project

INDEX_SCHEMA_VERSION = 1


@dataclass(frozen=True)
class Asset:
    name: str
    kind: str  # tokenizer | vector_index | vector_index_vectors
    file: str  # path inside the bundle
    source: Path


def _max_tokens(m: Manifest, model: str) -> int:
    spec = m.models[model]
    first = next(iter(spec.inputs.values()))
    dynamic = [spec.dims[d].max for d in first.shape if isinstance(d, str)]
    return min(dynamic) if dynamic else int(first.shape[-1])


def _index(project: Project, name: str, ix: IndexAsset, program: UnitResult, cache: Cache,
           progress: Any) -> Path:
    folder = project.folder
    tokenizer = tokenizer_file(project.manifest.pipeline.tokenizers[ix.tokenizer], folder)  # type: ignore[union-attr]
    assert tokenizer is not None  # checked at load time
    files, _ = corpus_files(ix, folder)
    max_tokens = _max_tokens(project.manifest, ix.model)
    key = key_of({"schema": INDEX_SCHEMA_VERSION, "program": program.unit.program_key,
                  "tokenizer": file_sha256(tokenizer), "max_tokens": max_tokens,
                  "corpus": [[f.relative_to(folder).as_posix(), file_sha256(f)] for f in files],
                  "chunking": ix.chunking.model_dump()})
    store = cache.of_kind("indexes")
    entry, warning = store.get(key)
    if warning:
        progress(warning)
    if entry is not None:
        return entry.path
    with store.lock(key):
        entry, _ = store.get(key)
        if entry is not None:
            return entry.path
        progress(f"  index {name}: embedding {len(files)} file(s) with {program.unit.model}'s program")
        chunks = chunk_corpus(files, folder, ix.chunking.words, ix.chunking.overlap)
        staging = store.tmp_dir()
        try:
            (staging / "texts.json").write_text(json.dumps([c.text for c in chunks]))
            proc = subprocess.run([sys.executable, "-m", "deployc.runtime.embed_worker", str(program.program),
                                   str(tokenizer), str(max_tokens), str(staging / "texts.json"),
                                   str(staging / "vectors.npy")], capture_output=True, text=True)
            if proc.returncode != 0:
                tail = " | ".join(proc.stderr.strip().splitlines()[-3:])
                raise BuildError(f"index {name}: embedding the corpus failed (exit {proc.returncode}): {tail[:400]}")
            import numpy as np  # only when an index is (re)built: a no-op rebuild stays light

            vectors = np.load(staging / "vectors.npy").astype("<f4")
            (staging / "vectors.f32").write_bytes(vectors.tobytes())
            meta = {"schema_version": INDEX_SCHEMA_VERSION, "name": name, "model": ix.model,
                    "count": int(vectors.shape[0]), "dim": int(vectors.shape[1]), "metric": "cosine",
                    "vectors": f"{name}.f32",
                    "chunks": [{"id": c.id, "source": c.source, "text": c.text} for c in chunks]}
            (staging / "index.json").write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")
            for extra in ("texts.json", "vectors.npy"):
                (staging / extra).unlink()
            return store.put(key, staging).path
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise


def build_assets(project: Project, target: str, results: dict[str, UnitResult], cache: Cache,
                 progress: Any) -> list[Asset]:
    pipeline = project.manifest.pipeline
    if pipeline is None:
        return []
    assets = []
    for name, t in sorted(pipeline.tokenizers.items()):
        path = tokenizer_file(t, project.folder)
        assert path is not None
        assets.append(Asset(name, "tokenizer", f"assets/tokenizers/{name}.json", path))
    for name, ix in sorted(pipeline.indexes.items()):
        built = _index(project, name, ix, results[f"{ix.model}@{target}"], cache, progress)
        assets.append(Asset(name, "vector_index", f"assets/indexes/{name}.json", built / "index.json"))
        assets.append(Asset(f"{name}.vectors", "vector_index_vectors", f"assets/indexes/{name}.f32",
                            built / "vectors.f32"))
    return assets
