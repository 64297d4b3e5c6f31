"""Which Hugging Face architectures deployc builds and verifies, as a table, in one run.

    .venv/bin/python benchmarks/coverage.py [--schemes fp32,w8a8] [--only bert,vit] [--jobs 2]

Every architecture in benchmarks/hf_zoo.py (tiny, seeded, saved offline) goes through one manifest
(`source.huggingface`, the task, nothing else declared: inputs and dims come from config.json) in each
scheme, built for arduino_q's CPU (XNNPACK) and verified against eager PyTorch at the dims' min, middle
and max. w8a8 is static int8 (PT2E, calibrated on 16 generated samples): it quantizes convolutions too.
Cold cache in a temp dir. Prints, per architecture and scheme: built, verified (worst cosine / SQNR)
or the step and class of the failure (text-generation programs: also the greedy tokens that match eager's);
then the counts.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from hf_zoo import ARCHS, error_class, manifest, save


def _cell(unit: dict | None, made: str | None) -> str:
    if made:
        return f"not made: {made[:30]}"
    if unit is None:
        return "not planned"
    v = unit.get("verification") or {}
    if unit["status"] in ("built", "cached") and v.get("status") == "passed":
        m, t = v["metrics"], v.get("tokens")
        tokens = f", tok {t['matched']}/{t['generated']}" if t else ""
        return f"ok {m['min_cosine']:.4f} / {m['min_sqnr_db']:.1f} dB{tokens}"
    if v.get("status") == "failed" and v.get("metrics"):
        m = v["metrics"]
        return f"missed {m['min_cosine']:.4f} / {m['min_sqnr_db']:.1f} dB"
    return error_class(unit.get("failure")) or unit["status"]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--schemes", default="fp32,w8a8")
    parser.add_argument("--only", default="")
    parser.add_argument("--jobs", default="2")
    args = parser.parse_args()
    schemes = args.schemes.split(",")
    archs = [a for a in ARCHS if not args.only or a.name in args.only.split(",")]
    with tempfile.TemporaryDirectory(prefix="deployc-coverage-") as tmp:
        work = Path(tmp)
        not_made = save(archs, work / "hf")
        made = [a for a in archs if a.name not in not_made]
        (work / "coverage.yaml").write_text(manifest(made, schemes))
        start = time.perf_counter()
        proc = subprocess.run([sys.executable, "-m", "deployc", "build", "coverage.yaml", "--json", "--jobs",
                               args.jobs, "--cache-dir", "cache", "--out", "dist"], cwd=work, capture_output=True,
                              text=True)
        elapsed = time.perf_counter() - start
        if not proc.stdout.strip():
            raise SystemExit(f"the build printed no report (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
        units = {u["model"]: u for u in json.loads(proc.stdout)["units"]}
    print(f"{'architecture':<14} {'family':<8} " + " ".join(f"{s:<34}" for s in schemes))
    verified = dict.fromkeys(schemes, 0)
    for arch in archs:
        cells = []
        for s in schemes:
            unit = units.get(f"{arch.name}_{s}")
            cell = _cell(unit, not_made.get(arch.name))
            verified[s] += cell.startswith("ok")
            cells.append(f"{cell:<34}")
        print(f"{arch.name:<14} {arch.family:<8} " + " ".join(cells))
    print()
    print(", ".join(f"{s}: {verified[s]}/{len(archs)} verified" for s in schemes)
          + f" ({len(made) * len(schemes)} programs in {elapsed:.0f} s, {args.jobs} jobs)")


if __name__ == "__main__":
    main()
