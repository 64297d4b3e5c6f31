"""Which architectures (transformers', and pytorchcv's mobile families) deployc builds and verifies, as a
table, in one run.

    .venv/bin/python benchmarks/coverage.py [--schemes fp32,w8a8] [--only bert,vit] [--jobs 2]
    .venv/bin/python benchmarks/coverage.py --unit npu --schemes fp16,w8a8,16a8w --plain [--work DIR]

`--unit npu` builds the rows for snapdragon's NPU instead (QNN, text at a static 16 tokens, verified on
the HTP emulator); `--plain` adds, beside each NPU row, the plain hand-written Qualcomm path
(benchmarks/qnn_plain.py), with deployc's program judged again on the plain path's samples ("ours"), so
the two are compared on one input set. `--work` keeps the models, cache and logs; `--report` saves the build's JSON.

Every architecture in benchmarks/hf_zoo.py (tiny, seeded, saved offline) goes through one manifest
(`source.huggingface`, the task, nothing else declared: inputs and dims come from config.json; a pytorchcv
row: `source.factory` with its scaled weights as `source.checkpoint`, a 224 x 224 image) in each
scheme, built for arduino_q's CPU (XNNPACK) and verified against eager PyTorch on at least three seeded
inputs (the dims' min, middle and max for a dynamic model). w8a8 is static int8 (PT2E, calibrated on
`--calibration` generated samples, 16 unless told): it quantizes convolutions too.
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
from typing import Any

from hf_zoo import ARCHS, NPU_SEQ, error_class, manifest, save


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
    parser.add_argument("--unit", choices=("cpu", "npu"), default="cpu",
                        help="cpu: arduino_q's CPU (XNNPACK); npu: snapdragon's NPU (QNN, HTP emulator)")
    parser.add_argument("--report", type=Path, help="also write the build's --json report here")
    parser.add_argument("--work", type=Path, help="build in this folder and keep it (default: a temp dir)")
    parser.add_argument("--plain", action="store_true",
                        help="npu: also build each row by the plain hand-written Qualcomm path (qnn_plain.py)")
    parser.add_argument("--calibration", type=int, default=16,
                        help="generated calibration samples of the static schemes (w8a8, 16a8w)")
    parser.add_argument("--judge", default="3",
                        help="with --plain: how many random samples both paths' programs are judged on (the worst)")
    args = parser.parse_args()
    schemes = args.schemes.split(",")
    archs = [a for a in ARCHS if not args.only or a.name in args.only.split(",")]
    with tempfile.TemporaryDirectory(prefix="deployc-coverage-") as tmp:
        work = args.work or Path(tmp)  # --work keeps the models, cache and logs to look at afterwards
        work.mkdir(parents=True, exist_ok=True)
        not_made = save(archs, work / "hf")
        made = [a for a in archs if a.name not in not_made]
        refused = _refused(work, made, schemes, "qnn" if args.unit == "npu" else "xnnpack")
        rows = {(a.name, s) for a in made for s in schemes} - set(refused)
        (work / "coverage.yaml").write_text(manifest(made, schemes, samples=args.calibration, unit=args.unit,
                                                         rows=rows, root=work))
        start = time.perf_counter()
        proc = subprocess.run([sys.executable, "-m", "deployc", "build", "coverage.yaml", "--json", "--jobs",
                               args.jobs, "--cache-dir", "cache", "--out", "dist"], cwd=work, capture_output=True,
                              text=True)
        elapsed = time.perf_counter() - start
        if not proc.stdout.strip():
            raise SystemExit(f"the build printed no report (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
        if args.report:
            args.report.write_text(proc.stdout)
        units = {u["model"]: u for u in json.loads(proc.stdout)["units"]}
        plain = (_plain_rows(work, made, schemes, int(args.jobs), units, args.judge)
                 if args.plain and args.unit == "npu" else {})
    columns = [(s, "") for s in schemes] + ([(s, " plain") for s in schemes] if plain else [])
    print(f"{'architecture':<19} {'family':<8} " + " ".join(f"{s + p:<34}" for s, p in columns))
    verified = dict.fromkeys(schemes, 0)
    plain_verified = dict.fromkeys(schemes, 0)
    behind: list[str] = []  # rows where deployc's program does worse than the plain one on the same samples
    for arch in archs:
        cells = []
        for s in schemes:
            why = refused.get((arch.name, s))
            cell = f"refused at plan: {why[:17]}" if why else _cell(units.get(f"{arch.name}_{s}"),
                                                                    not_made.get(arch.name))
            verified[s] += cell.startswith("ok")
            cells.append(f"{cell:<34}")
        for s in schemes if plain else []:
            cell, gap = plain.get((arch.name, s), ("not made", None))
            plain_verified[s] += cell.startswith("ok")
            cells.append(f"{cell:<34}")
            if gap is not None and gap < 0:
                behind.append(f"{arch.name} {s} ({gap:+.1f} dB)")
        print(f"{arch.name:<19} {arch.family:<8} " + " ".join(cells))
    print()
    print(", ".join(f"{s}: {verified[s]}/{len(archs)} verified" for s in schemes)
          + f" ({len(made) * len(schemes)} programs in {elapsed:.0f} s, {args.jobs} jobs)")
    if plain:
        print("plain Qualcomm path: " + ", ".join(f"{s}: {plain_verified[s]}/{len(archs)} verified" for s in schemes))
        compared = sum(gap is not None for _, gap in plain.values())
        print(f"on the plain path's samples, deployc's program is below it on {len(behind)} of {compared} rows "
              f"both built{': ' + ', '.join(behind) if behind else ''}")


def _refused(work: Path, archs: list, schemes: list[str], backend: str) -> dict[tuple[str, str], str]:
    """The rows the unit's backend refuses at plan time (qnn.REFUSED, base.EXECUTORCH_REFUSED): pinned to
    the unit, they would stop the plan."""
    from deployc.targets.backends import BACKENDS

    out = {}
    for arch in archs:
        if arch.pytorchcv:  # no transformers model_type: none is refused by name
            continue
        model_type = json.loads((work / "hf" / arch.name / "config.json").read_text())["model_type"]
        for s in schemes:
            why = BACKENDS[backend].refusal(model_type, s)
            if why:
                out[(arch.name, s)] = why
    return out


def _plain_rows(work: Path, archs: list, schemes: list[str], jobs: int,
                units: dict[str, dict], judge: str) -> dict[tuple[str, str], tuple[str, float | None]]:
    """Each (architecture, scheme) through qnn_plain.py, one process each (an emulator crash ends only it):
    its cell, and where deployc built the row too, deployc's SQNR minus the plain one on the plain path's
    samples (both programs judged on the same inputs)."""
    from concurrent.futures import ThreadPoolExecutor

    script = Path(__file__).resolve().parent / "qnn_plain.py"

    def one(arch: Any, scheme: str) -> tuple[str, float | None]:
        if arch.task == "text-generation":  # deployc's own KV-cache decoder: no plain counterpart to build
            return "not compared", None
        task = f"pytorchcv:{arch.pytorchcv}" if arch.pytorchcv else arch.task
        unit = units.get(f"{arch.name}_{scheme}") or {}
        theirs = ["--deployc", str(work / unit["pte"])] if unit.get("status") == "built" else []
        proc = subprocess.run([sys.executable, str(script), str(work / "hf" / arch.name), task, scheme,
                               "--seq", str(NPU_SEQ), "--judge", judge, *theirs], capture_output=True, text=True)
        line = next((x for x in proc.stdout.splitlines() if x.startswith("RESULT ")), None)
        if line is None:
            last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
            return f"run: crashed (exit {proc.returncode}) {last[:40]}", None
        r = json.loads(line[len("RESULT "):])
        if r["status"] == "failed":
            return f"{r['step']}: {r['error'][:40]}", None
        word = "ok" if r["status"] == "passed" else "missed"
        cell = f"{word} {r['min_cosine']:.4f} / {r['min_sqnr_db']:.1f} dB"
        if "deployc_error" in r:  # deployc's program did not run on these samples: said, not compared
            return f"{cell} (ours not run: {r['deployc_error'][:30]})", None
        if "deployc_min_sqnr_db" not in r:
            return cell, None
        return f"{cell} (ours {r['deployc_min_sqnr_db']:.1f})", r["deployc_min_sqnr_db"] - r["min_sqnr_db"]

    pairs = [(a, s) for a in archs for s in schemes]
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        cells = list(pool.map(lambda p: one(*p), pairs))
    return {(a.name, s): c for (a, s), c in zip(pairs, cells)}


if __name__ == "__main__":
    main()
