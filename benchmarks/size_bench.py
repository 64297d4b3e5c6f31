"""Program size against the weight-bits floor, with and without quantized embedding tables, in one run.

    .venv/bin/python benchmarks/size_bench.py

The RAG example's two programs for arduino_q's CPU (XNNPACK): all-MiniLM-L6-v2 in 8da8w (real weights,
22.7M parameters) and the placeholder decoder in 8da4w (group 32), each built twice: embedding tables
quantized (the default) and `quantization: {embeddings: false}`. Prints the .pte size, its ratio to
parameters x weight bits / 8 (goals: <= 1.15x for the 8-bit embedder, <= 1.3x for the 4-bit decoder,
group scales included), and the build's verification against eager fp32 (worst cosine, SQNR, and
for the decoder the greedy tokens that match). Cold cache in a temp dir.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

EMBEDDER = """\
    task: embedding
    source: {factory: models.minilm:build}
    inputs:
      input_ids: {shape: [1, seq], dtype: int64, range: [0, 30521]}
      attention_mask: {shape: [1, seq], dtype: int64, range: [1, 1]}
    dims: {seq: {min: 2, max: 128}}
    outputs: {embedding: {shape: [1, 384]}}
    verify: {min_cosine: 0.99}
"""
DECODER = """\
    task: text-generation
    source:
      factory: models.tiny_llm:build
      kwargs: {vocab_size: 30522, dim: 128, layers: 2, heads: 4, hidden: 256, max_seq_len: 384}
    inputs:
      tokens: {shape: [1, seq], dtype: int64, range: [0, 30521]}
      input_pos: {shape: [seq], dtype: int64, fill: arange}
    dims: {seq: {min: 1, max: 384}}
    outputs: {logits: {shape: [1, 30522]}}
    constants: {vocab_size: 30522, max_seq_len: 384, bos_id: 101, eos_ids: [102]}
"""
# name -> (model text, scheme, weight bits, goal ratio)
MODELS = {"embedder": (EMBEDDER, "8da8w", 8, 1.15), "llm": (DECODER, "8da4w", 4, 1.3)}


def _params(factory: str, kwargs: dict) -> int:
    sys.path.insert(0, str(REPO / "manifests"))
    import importlib

    module, attr = factory.split(":")
    model = getattr(importlib.import_module(module), attr)(**kwargs)
    return sum(p.numel() for p in model.parameters())


def main() -> None:
    text = "apiVersion: deployc/v1\nname: size-bench\nversion: 0.1.0\ntargets: [arduino_q]\nmodels:\n"
    for name, (body, scheme, _, _) in MODELS.items():
        for embeddings in (True, False):
            text += f"  {name}_{'q' if embeddings else 'f'}:\n{body}"
            text += f"    quantization: {{scheme: {scheme}, embeddings: {str(embeddings).lower()}}}\n"
    params = {"embedder": _params("models.minilm:build", {}),
              "llm": _params("models.tiny_llm:build", {"vocab_size": 30522, "dim": 128, "layers": 2, "heads": 4,
                                                      "hidden": 256, "max_seq_len": 384})}
    with tempfile.TemporaryDirectory(prefix="deployc-size-") as tmp:
        work = Path(tmp)
        shutil.copytree(REPO / "manifests" / "models", work / "models")
        (work / "size.yaml").write_text(text)
        start = time.perf_counter()
        proc = subprocess.run([sys.executable, "-m", "deployc", "build", "size.yaml", "--json", "--jobs", "2",
                               "--cache-dir", "cache", "--out", "dist"], cwd=work, capture_output=True, text=True)
        elapsed = time.perf_counter() - start
        if not proc.stdout.strip():
            raise SystemExit(f"the build printed no report (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
        units = {u["model"]: u for u in json.loads(proc.stdout)["units"]}
    print(f"{'program':<10} {'scheme':<6} {'embeddings':<11} {'size':>12} {'floor':>12} {'ratio':>6} {'goal':>6} "
          f"{'cosine':>8} {'SQNR':>8} {'tokens':>7}")
    for name, (_, scheme, bits, goal) in MODELS.items():
        floor = params[name] * bits // 8
        for tag, label in (("q", "quantized"), ("f", "float")):
            u = units[f"{name}_{tag}"]
            v = u.get("verification") or {}
            m, t = v.get("metrics") or {}, v.get("tokens")
            size = u.get("size_bytes") or 0
            ratio = size / floor
            tokens = f"{t['matched']}/{t['generated']}" if t else "-"
            print(f"{name:<10} {scheme:<6} {label:<11} {size:>12,} {floor:>12,} {ratio:>5.2f}x "
                  f"{'<=' + str(goal) if tag == 'q' else '':>6} {m.get('min_cosine', 0):>8.5f} "
                  f"{m.get('min_sqnr_db', 0):>6.1f}dB {tokens:>7}"
                  + ("" if u["status"] != "failed" else f"  FAILED: {u['failure']['error'][:80]}"))
    print(f"\n{len(units)} programs in {elapsed:.0f} s; floor = parameters x weight bits / 8 "
          f"(embedder {params['embedder']:,} params, decoder {params['llm']:,})")


if __name__ == "__main__":
    main()
