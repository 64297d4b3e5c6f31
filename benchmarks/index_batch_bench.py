"""Would batched index builds help? The RAG embedder (all-MiniLM-L6-v2, 8da8w, XNNPACK, arduino_q's
unit) built twice in one throw-away manifest, chunks per second side by side:

- `unbatched`: the bundle's program as it is (batch 1, dynamic length), called once per chunk at the
  chunk's own token count, as the index builder does today;
- `batch B`: the same model with a dynamic batch dim (1..32). XNNPACK lowers only one dynamic dim per
  reshape ("XNNPACK reshape only supports 1 dynamic dimension", measured), so this program takes a
  static length and every chunk is padded to it (64 tokens, enough for most 60-word chunks).

    .venv/bin/python benchmarks/index_batch_bench.py          (two cold lowerings, ~2 minutes)

Timed after load and one warm-up call, median of 5 passes over the same 64 real corpus chunks.
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
"""


def main() -> int:
    import numpy as np
    import torch

    from deployc.packaging.corpus import chunk_corpus
    from deployc.runtime.host import load_program
    from deployc.runtime.tokenizer import encode, load_tokenizer

    sys.path.insert(0, str(ROOT / "manifests"))
    from models.minilm import tokenizer_path

    work = Path(tempfile.mkdtemp(prefix="index-batch-"))
    try:
        shutil.copytree(ROOT / "manifests" / "models", work / "models")
        (work / "m.yaml").write_text(MANIFEST)
        subprocess.run([str(ROOT / ".venv" / "bin" / "deployc"), "build", str(work / "m.yaml"), "--out",
                        str(work / "dist"), "--cache-dir", str(work / "cache")], check=True, capture_output=True)
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
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
