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
from deployc.fingerprint import file_sha256
from deployc.graph.corpus import chunk_corpus
from deployc.graph.pipeline import tokenizer_file
from deployc.plan import IndexAssetPlan, TargetPlan, TokenizerAssetPlan
from deployc.project import Project

INDEX_SCHEMA_VERSION = 1


@dataclass(frozen=True)
class Asset:
    name: str
    kind: str  # tokenizer | vector_index | vector_index_vectors
    file: str  # path inside the bundle
    source: Path


def _index(project: Project, plan: IndexAssetPlan, program: UnitResult, cache: Cache, progress: Any) -> Path:
    folder = project.folder
    pipeline = project.manifest.pipeline
    assert pipeline is not None
    tokenizer = tokenizer_file(pipeline.tokenizers[plan.tokenizer], folder)
    files = [folder / f.path for f in plan.corpus]
    # The plan hashed these files; what is used now must be what was hashed.
    if tokenizer is None or file_sha256(tokenizer) != plan.tokenizer_sha256 or any(
            file_sha256(p) != f.sha256 for p, f in zip(files, plan.corpus)):
        raise BuildError(f"index {plan.name}: the tokenizer or a corpus file changed since the plan was made")
    store = cache.of_kind("indexes")
    key = plan.key
    name = plan.name
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
        chunks = chunk_corpus(files, folder, plan.words, plan.overlap)
        staging = store.tmp_dir()
        try:
            (staging / "texts.json").write_text(json.dumps([c.text for c in chunks]))
            proc = subprocess.run([sys.executable, "-m", "deployc.runtime.embed_worker", str(program.program),
                                   str(tokenizer), str(plan.max_tokens), str(staging / "texts.json"),
                                   str(staging / "vectors.npy")], capture_output=True, text=True)
            if proc.returncode != 0:
                tail = " | ".join(proc.stderr.strip().splitlines()[-3:])
                raise BuildError(f"index {name}: embedding the corpus failed (exit {proc.returncode}): {tail[:400]}")
            import numpy as np  # only when an index is (re)built: a no-op rebuild stays light

            vectors = np.load(staging / "vectors.npy").astype("<f4")
            (staging / "vectors.f32").write_bytes(vectors.tobytes())
            meta = {"schema_version": INDEX_SCHEMA_VERSION, "name": name, "model": plan.model,
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


def build_assets(project: Project, target: TargetPlan, results: dict[str, UnitResult], cache: Cache,
                 progress: Any) -> list[Asset]:
    pipeline = project.manifest.pipeline
    assets = []
    for a in target.assets:
        if isinstance(a, TokenizerAssetPlan):
            path = tokenizer_file(pipeline.tokenizers[a.name], project.folder)  # type: ignore[union-attr]
            if path is None or file_sha256(path) != a.sha256:
                raise BuildError(f"tokenizer {a.name} changed since the plan was made")
            assets.append(Asset(a.name, "tokenizer", a.file, path))
        else:
            built = _index(project, a, results[f"{a.model}@{target.target}"], cache, progress)
            assets.append(Asset(a.name, "vector_index", a.file, built / "index.json"))
            assets.append(Asset(f"{a.name}.vectors", "vector_index_vectors", a.file.removesuffix(".json") + ".f32",
                                built / "vectors.f32"))
    return assets
