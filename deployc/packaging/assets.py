"""A target's pipeline assets: tokenizer files and vector indexes (built once per content key, cached).

An index embeds every corpus chunk with the target's built embedding program through the ExecuTorch
runtime, in a child process, so that on-device query embeddings and indexed vectors agree.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from deployc.build.cache import Cache
from deployc.build.results import UnitResult
from deployc.core import layout
from deployc.core.digests import file_sha256
from deployc.core.errors import BuildError
from deployc.core.events import Say
from deployc.graph import host_runtime
from deployc.packaging import embed_worker
from deployc.packaging.corpus import Chunk, chunk_corpus
from deployc.pipeline.asset_sources import tokenizer_file
from deployc.plan.build_plan import (
    BuildPlan,
    IndexAssetPlan,
    LoadModel,
    TargetPlan,
    TokenizerAssetPlan,
)
from deployc.targets.backends import BACKENDS

INDEX_SCHEMA_VERSION = 1


@dataclass(frozen=True)
class Asset:
    name: str
    kind: str  # tokenizer | vector_index | vector_index_vectors
    file: str  # path inside the bundle
    source: Path


def _tokenizer(plan: BuildPlan, a: TokenizerAssetPlan) -> Path:
    """The tokenizer file, found again where the manifest says, and still what the plan hashed."""
    path = tokenizer_file(a.source, plan.folder)
    if path is None or file_sha256(path) != a.sha256:
        raise BuildError(f"tokenizer {a.name} changed since the plan was made")
    return path


def _index(plan: BuildPlan, target: TargetPlan, a: IndexAssetPlan, program: UnitResult,
           reference: UnitResult | None, cache: Cache, say: Say) -> Path:
    folder = plan.folder
    files = [folder / f.path for f in a.corpus]
    label = f"index {a.name} on {target.target}"  # a two-target build embeds the corpus once per target
    if any(file_sha256(p) != f.sha256 for p, f in zip(files, a.corpus)):
        raise BuildError(f"{label}: a corpus file changed since the plan was made")
    store = cache.of_kind("indexes")
    entry, warning = store.get(a.key)
    if warning:
        say(warning)
    if entry is not None:
        return entry.path
    with store.lock(a.key):
        entry, _ = store.get(a.key)
        if entry is not None:
            return entry.path
        staging = store.tmp_dir()
        try:
            if a.image_steps is not None:  # one entry per image: its file name stands for its text
                chunks = [Chunk(id=i, source=f.path, text=Path(f.path).name) for i, f in enumerate(a.corpus)]
                (staging / "steps.json").write_text(json.dumps(a.image_steps))
                texts = [str(p) for p in files]
            else:
                chunks = chunk_corpus(files, folder, a.words, a.overlap)
                texts = [c.text for c in chunks]
            embedder = _Embedder(plan, target, a, staging, cache, label, say)
            meta: dict[str, Any] = {}
            if reference is None:
                say(f"{label}: embedding {len(files)} file(s) with {program.unit.model}'s program "
                    f"({program.unit.unit}, {program.unit.backend})")
                vectors = embedder.run(program, texts, "vectors")
            else:
                vectors, meta = _by_reference(embedder, a, program, reference, texts, label, say)
            if a.queries is not None:
                meta["retrieval"] = _retrieval(embedder, a, program, texts, vectors, label, say)
            (staging / "vectors.f32").write_bytes(vectors.astype("<f4").tobytes())
            meta = {"schema_version": INDEX_SCHEMA_VERSION, "name": a.name, "model": a.model,
                    "count": int(vectors.shape[0]), "dim": int(vectors.shape[1]), "metric": "cosine",
                    "vectors": Path(layout.index_vectors_file(a.file)).name,
                    "chunks": [{"id": c.id, "source": c.source, "text": c.text} for c in chunks], **meta}
            (staging / "index.json").write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")
            for extra in ("steps.json", "load.json"):
                (staging / extra).unlink(missing_ok=True)
            return store.put(a.key, staging).path
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise


def _by_reference(embedder: _Embedder, a: IndexAssetPlan, program: UnitResult, reference: UnitResult,
                  texts: list[str], label: str, say: Say) -> tuple[Any, dict[str, Any]]:
    """The corpus embedded by the host reference program, and the target's program on a sample of it:
    the substitution holds only if the sample's rankings agree (packaging/index_agreement.py)."""
    from deployc.packaging import index_agreement

    assert a.agreement is not None and a.reference is not None
    if reference.status == "failed":
        failure = reference.failure
        raise BuildError(f"{label}: the host reference program ({a.reference.label}) failed"
                         + (f" at {failure.step}: {failure.error}" if failure else ""))
    say(f"{label}: embedding {len(texts)} chunk(s) with the host reference program of {a.model} (xnnpack fp32)")
    vectors = embedder.run(reference, texts, "reference")
    rows = index_agreement.sample_rows(len(texts), a.agreement.sample)
    say(f"{label}: the target's program ({program.unit.unit}, {program.unit.backend}) on {len(rows)} of them")
    sampled = embedder.run(program, [texts[i] for i in rows], "sample")
    agreement = index_agreement.measure(vectors[rows], sampled, a.agreement.topk, a.agreement.min_topk_overlap,
                                        a.agreement.max_score_diff)
    figures = (f"top-{agreement.topk} overlap {agreement.topk_overlap:.1%}, score difference max "
               f"{agreement.max_score_diff:.4f} (mean {agreement.mean_score_diff:.4f}) on {agreement.sample} chunks")
    if agreement.missed:
        raise BuildError(f"{label}: the host reference program's vectors do not stand in for the target's: "
                         f"{'; '.join(agreement.missed)} ({figures}); use embed_with: target, or loosen "
                         "pipeline.indexes.<name>.agreement")
    say(f"{label}: the reference stands in for the target's program: {figures}")
    return vectors, {"embedded_with": {"program": "reference", "backend": reference.unit.backend,
                                       "quantization": reference.unit.quantization,
                                       "program_key": reference.unit.program_key,
                                       "target_program_key": program.unit.program_key},
                     "agreement": {**agreement.model_dump(), "rows": rows}}


def _retrieval(embedder: _Embedder, a: IndexAssetPlan, program: UnitResult, texts: list[str], vectors: Any,
               label: str, say: Say) -> dict[str, Any]:
    """The query set's top-k chunks as the device will find them (the target's program's query vectors
    against the index's vectors) against eager fp32's; below the tolerance the bundle is not written."""
    from deployc.packaging import index_agreement

    q = a.queries
    assert q is not None
    say(f"{label}: {len(q.queries)} queries from {q.file}: eager fp32 on them and the corpus, the target's "
        f"program ({program.unit.unit}, {program.unit.backend}) on the queries")
    eager = embedder.run_eager(q.eager, texts + q.queries, "eager")
    device = embedder.run(program, q.queries, "queries")
    try:
        measured = index_agreement.retrieval(eager[len(texts):], eager[:len(texts)], device, vectors, q.topk,
                                             q.min_topk_overlap, q.file)
    except ValueError as exc:
        raise BuildError(f"{label}: {exc}") from exc
    figures = (f"top-{measured.topk} overlap {measured.topk_overlap:.1%}, mean rank change "
               f"{measured.mean_rank_change:.2f} on {measured.queries} queries")
    if measured.missed:
        raise BuildError(f"{label}: the device's retrieval differs from eager fp32's: {'; '.join(measured.missed)}")
    say(f"{label}: retrieval agrees with eager fp32: {figures}")
    return measured.model_dump()


class _Embedder:
    """Runs the embed worker on a list of texts (or image paths) with one program, passing its progress on."""

    def __init__(self, plan: BuildPlan, target: TargetPlan, a: IndexAssetPlan, staging: Path, cache: Cache,
                 label: str, say: Say) -> None:
        self.plan, self.target, self.a, self.staging, self.cache, self.label, self.say = (
            plan, target, a, staging, cache, label, say)

    def run(self, program: UnitResult, texts: list[str], tag: str) -> Any:
        a = self.a
        if a.image_steps is not None:
            worker = ["--images", str(program.program), str(self.staging / "steps.json")]
        else:
            worker = [str(program.program), *self._tokens()]
        backend = BACKENDS[program.unit.backend]
        env = {**os.environ, **backend.child_env(), **host_runtime.child_env(backend.host_niceness)}  # QNN's libraries
        return self._embed(worker, env, texts, tag)

    def run_eager(self, load: LoadModel, texts: list[str], tag: str) -> Any:
        """The same texts through eager fp32 PyTorch (the model as the plan loads it)."""
        (self.staging / "load.json").write_text(load.model_dump_json())
        return self._embed(["--eager", str(self.staging / "load.json"), str(self.plan.folder), *self._tokens()],
                           dict(os.environ), texts, tag)

    def _tokens(self) -> list[str]:
        a = self.a
        tokenizer = _tokenizer(self.plan, next(t for t in self.target.assets if isinstance(t, TokenizerAssetPlan)
                                               and t.name == a.tokenizer))
        return [str(tokenizer), str(a.max_tokens), str(a.pad_to or 0)]

    def _embed(self, args: list[str], env: dict[str, str], texts: list[str], tag: str) -> Any:
        import numpy as np  # only when an index is (re)built: a no-op rebuild stays light

        a, staging = self.a, self.staging
        noun = "images" if a.image_steps is not None else "chunks"
        (staging / f"{tag}.json").write_text(json.dumps(texts))
        worker = [sys.executable, "-m", embed_worker.__name__, *args]
        out = staging / f"{tag}.npy"
        stdout, stderr, code = _embed([*worker, str(staging / f"{tag}.json"), str(out)], env,
                                      lambda line: self.say(f"{self.label}: {line}"), noun)
        self.cache.log_dir.mkdir(parents=True, exist_ok=True)
        (self.cache.log_dir / f"index-{a.name}-{a.key[:12]}-{tag}.log").write_text(stdout + stderr)
        if code != 0:
            tail = " | ".join(stderr.strip().splitlines()[-3:])
            raise BuildError(f"{self.label}: embedding the corpus failed (exit {code}): {tail[:400]}")
        rate = _rate(stdout, noun)
        if rate:
            self.say(f"{self.label}: {len(texts)} {noun} embedded at {rate}")
        vectors = np.load(out)
        out.unlink()
        (staging / f"{tag}.json").unlink()
        return vectors


def _embed(cmd: list[str], env: dict[str, str], progress: Say, noun: str) -> tuple[str, str, int]:
    """Run the embed worker, passing its progress lines on as they come: (stdout, stderr, exit code)."""
    with tempfile.TemporaryFile("w+") as err:  # a file, not a pipe: a full stderr pipe would block the worker
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, text=True, env=env)
        assert proc.stdout is not None
        lines = []
        for line in proc.stdout:
            lines.append(line)
            if shown := progress_line(line, noun):
                progress(shown)
        code = proc.wait()
        err.seek(0)
        return "".join(lines), err.read(), code


def progress_line(line: str, noun: str = "chunks") -> str:
    """`progress 40 200` from the embed worker as `40/200 chunks (20%)`; "" for any other line."""
    words = line.split()
    if len(words) != 3 or words[0] != "progress" or not words[1].isdigit() or not words[2].isdigit():
        return ""
    done, total = int(words[1]), int(words[2])
    return f"{done}/{total} {noun} ({done * 100 // max(total, 1)}%)"


def _rate(worker_stdout: str, noun: str = "chunks") -> str:
    """Chunks per second from the embed worker's last line (timed after loading the program)."""
    last = worker_stdout.strip().splitlines()[-1:] or [""]
    words = last[0].split()
    if len(words) != 4 or words[0] != "embedded" or float(words[3]) <= 0:
        return ""
    rate = int(words[1]) / float(words[3])
    # Slow programs (an NPU's on the HTP emulator: under one chunk a second) keep two digits, not "0".
    return f"{rate:,.0f} {noun}/s" if rate >= 10 else f"{rate:.2g} {noun}/s"


def build_assets(plan: BuildPlan, target: TargetPlan, results: dict[str, UnitResult],
                 references: dict[str, UnitResult], cache: Cache, say: Say) -> list[Asset]:
    """`references`: the host reference programs (indexes with embed_with: reference), by program key."""
    programs = {r.unit.model: r for r in results.values() if r.unit.target == target.target}
    assets = []
    for a in target.assets:
        if isinstance(a, TokenizerAssetPlan):
            assets.append(Asset(a.name, "tokenizer", a.file, _tokenizer(plan, a)))
        else:
            reference = references[a.reference.program_key] if a.reference is not None else None
            built = _index(plan, target, a, programs[a.model], reference, cache, say)
            assets.append(Asset(a.name, "vector_index", a.file, built / "index.json"))
            assets.append(Asset(f"{a.name}.vectors", "vector_index_vectors", layout.index_vectors_file(a.file),
                                built / "vectors.f32"))
    return assets
