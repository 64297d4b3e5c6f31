"""The demo decoder (manifests/decoder, trained here) in every CPU scheme, side by side in one run: the
table a user reads to choose a quantization for a decoder.

    .venv/bin/python benchmarks/decoder_quant_bench.py

Builds it for arduino_q's CPU (XNNPACK) in fp32, 8da8w, 8da4w with groups of 32 and 128, and w8a8, cold
in a temp dir, each verified by the build on the decoder's held-out text (manifests/decoder/heldout.txt:
documentation paragraphs it was not trained on). Prints the .pte size, perplexity against eager fp32's,
mean KL divergence, top-1 agreement, greedy parity, and host decode speed: tokens per second of the
bundle's program through the ExecuTorch runtime on this x86 machine (2 cores), greedy from one prompt
after its prefill; not a phone's figure. Tolerances are switched off (`enabled` stays, the figures are
what is measured), so a scheme that would miss its defaults is still shown.
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
# name -> quantization as the manifest writes it
SCHEMES = {"fp32": "fp32", "8da8w": "8da8w", "8da4w_g32": "{scheme: 8da4w, group_size: 32}",
           "8da4w_g128": "{scheme: 8da4w, group_size: 128}", "w8a8": "w8a8"}
LOOSE = "{max_perplexity_ratio: 100.0, max_kl: 100.0, min_top1: 0.0, min_cosine: -1.0, min_sqnr_db: -300.0}"
DECODE_TOKENS = 64


def _model(scheme: str) -> str:
    return f"llm_{scheme}"  # a model name starts with a letter


def _decode_speed(bundle_dir: Path, model: str) -> float:
    """Tokens per second of greedy decoding after a 32-token prefill, the program through the runtime."""
    import numpy as np

    from deployc.runtime.pipeline_runner import Bundle

    bundle = Bundle(bundle_dir)
    prompt = np.arange(1, 33, dtype=np.int64).reshape(1, -1)
    bundle.call(model, [prompt, np.arange(32, dtype=np.int64)])  # prefill (and the first load)
    token = np.asarray([[5]], dtype=np.int64)
    start = time.perf_counter()
    for i in range(DECODE_TOKENS):
        logits = bundle.call(model, [token, np.asarray([32 + i], dtype=np.int64)])[0]
        token = np.asarray([[int(np.argmax(logits))]], dtype=np.int64)
    return DECODE_TOKENS / (time.perf_counter() - start)


def main() -> None:
    text = "apiVersion: deployc/v1\nname: decoder-bench\nversion: 0.1.0\ntargets: [arduino_q]\nmodels:\n"
    for name, quant in SCHEMES.items():
        text += (f"  {_model(name)}:\n    task: text-generation\n    source: {{huggingface: decoder}}\n"
                 f"    dims: {{seq: {{min: 1, max: 384}}}}\n    quantization: {quant}\n"
                 f"    verify: {{text: decoder/heldout.txt, {LOOSE[1:]}\n")
    with tempfile.TemporaryDirectory(prefix="deployc-decoder-") as tmp:
        work = Path(tmp)
        shutil.copytree(REPO / "manifests" / "decoder", work / "decoder")
        (work / "bench.yaml").write_text(text)
        start = time.perf_counter()
        proc = subprocess.run([sys.executable, "-m", "deployc", "build", "bench.yaml", "--json", "--jobs", "2",
                               "--cache-dir", "cache", "--out", "dist"], cwd=work, capture_output=True, text=True)
        elapsed = time.perf_counter() - start
        if not proc.stdout.strip():
            raise SystemExit(f"the build printed no report (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
        units = {u["model"].removeprefix("llm_"): u for u in json.loads(proc.stdout)["units"]}
        bundle = work / "dist" / "decoder-bench" / "0.1.0" / "arduino_q"
        speed = {name: _decode_speed(bundle, _model(name)) for name in SCHEMES if units[name]["status"] != "failed"}
    print(f"{'scheme':<11} {'size':>11} {'ratio':>6} {'ppl':>8} {'fp32 ppl':>9} {'ppl x':>7} {'KL':>8} {'top-1':>6} "
          f"{'tokens':>14} {'tok/s':>7} {'x fp32':>7}")
    base_size = units["fp32"].get("size_bytes") or 1
    for name in SCHEMES:
        u = units[name]
        if u["status"] == "failed":
            print(f"{name:<11} FAILED: {u['failure']['error'][:100]}")
            continue
        v = u["verification"]
        t, g = v.get("text") or {}, v.get("tokens") or {}
        ppl, ref = t.get("perplexity", 0.0), t.get("reference_perplexity", 1.0)
        tokens = f"{g.get('matched', 0)}/{g.get('generated', 0)} ({g.get('identical', 0)}/{g.get('prompts', 0)})"
        print(f"{name:<11} {u['size_bytes']:>11,} {u['size_bytes'] / base_size:>5.2f}x {ppl:>8.3f} {ref:>9.3f} "
              f"{ppl / ref:>6.4f}x {t.get('kl', 0):>8.5f} {t.get('top1', 0):>6.1%} {tokens:>14} "
              f"{speed[name]:>7.1f} {speed[name] / speed['fp32']:>6.2f}x")
    positions = next((u["verification"]["text"]["positions"] for u in units.values()
                      if (u.get("verification") or {}).get("text")), 0)
    print(f"\n{len(units)} programs in {elapsed:.0f} s; perplexity, KL and top-1 over {positions} positions of "
          "decoder/heldout.txt; tokens: leading greedy tokens equal to eager fp32's on the worst prompt (prompts "
          f"whose every token is); tok/s: host decode of {DECODE_TOKENS} tokens, x86, 2 cores, not a phone")


if __name__ == "__main__":
    main()
