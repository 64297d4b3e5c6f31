"""The same models as LiteRT (.tflite, litert-torch) and as ExecuTorch (.pte, XNNPACK), side by side:
conversion time, program size, host latency and verification against eager PyTorch, from one cold
build of manifests/small_models_litert.yaml (android_litert and arduino_q) in a fresh cache.

    .venv/bin/python benchmarks/litert_bench.py          (needs the litert extra; ~1 minute)

conversion: export + quantize + lower + serialize for .pte; litert-torch's convert (quantization
included) + export for .tflite. latency: the build's verifier, median of 5 calls of the middle
verification point on this host (2 cores): the LiteRT interpreter (its default CPU path) against
the ExecuTorch runtime with XNNPACK. Both builds run at once (--jobs 2), as a user's build does.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
STEPS = ("export", "quantize", "lower", "serialize")


def main() -> int:
    work = Path(tempfile.mkdtemp(prefix="litert-bench-"))
    try:
        shutil.copytree(ROOT / "manifests", work / "project", ignore=shutil.ignore_patterns("__pycache__", "corpus"))
        manifest = work / "project" / "small_models_litert.yaml"
        command = [str(ROOT / ".venv" / "bin" / "deployc"), "build", str(manifest), "--out", str(work / "dist"),
                   "--cache-dir", str(work / "cache"), "--jobs", "2", "--json"]
        r = subprocess.run(command, capture_output=True, text=True)
        if r.returncode != 0:
            print(r.stderr[-2000:])
            return 1
        units = {(u["model"], u["target"]): u for u in json.loads(r.stdout)["units"]}
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"{'model':<11} {'format':<8} {'scheme':<6} {'convert s':>9} {'size B':>9} {'latency ms':>10} "
          f"{'cosine':>8} {'SQNR dB':>8}   {'tflite/pte: convert':>19} {'size':>6} {'latency':>8}")
    for model in ("classifier", "vision", "encoder"):
        rows = {}
        for target, fmt in (("android_litert", "tflite"), ("arduino_q", "pte")):
            u = units[(model, target)]
            convert = sum(u["durations_s"].get(s, 0.0) for s in STEPS)
            v = u["verification"]["metrics"]
            rows[fmt] = (convert, u["size_bytes"], u["latency_ms"] or 0.0)
            print(f"{model:<11} {fmt:<8} {u['quantization']:<6} {convert:>9.2f} {u['size_bytes']:>9,} "
                  f"{u['latency_ms'] or 0:>10.3f} {v['min_cosine']:>8.5f} {v['min_sqnr_db']:>8.1f}", end="")
            if fmt == "pte":
                t, p = rows["tflite"], rows["pte"]
                print(f"   {t[0] / p[0]:>18.2f}x {t[1] / p[1]:>5.2f}x {t[2] / max(p[2], 1e-9):>7.2f}x")
            else:
                print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
