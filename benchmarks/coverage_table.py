"""The whole coverage table, both units and all six schemes, from the reports coverage.py saved: one row per
architecture of benchmarks/hf_zoo.py, the counts under it, in markdown.

    .venv/bin/python benchmarks/coverage.py --unit cpu --schemes fp32,8da8w,w8a8 --report cpu.json
    .venv/bin/python benchmarks/coverage.py --unit npu --schemes fp16,16a8w,w8a8 --report npu.json
    .venv/bin/python benchmarks/coverage_table.py cpu.json npu.json [more.json ...]

A cell is the worst SQNR (dB) over the program's verification inputs when it verified, `missed` and that
figure when it missed a tolerance, the failure's class otherwise, `refused` where the unit's backend refuses
the architecture at plan time (coverage.py does not build those), `-` where no report has the row. A later
report's cell replaces an earlier one's, so a re-run of a few rows goes after the whole run it corrects.
Each cell also says on how many inputs it was judged where that is fewer than three (reports of builds made
before every program was verified on three).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from hf_zoo import ARCHS, error_class

COLUMNS = [("cpu", "fp32"), ("cpu", "8da8w"), ("cpu", "w8a8"), ("npu", "fp16"), ("npu", "16a8w"), ("npu", "w8a8")]
INT8 = {"cpu": ("w8a8",), "npu": ("w8a8", "16a8w")}  # the int8-weight target, per unit
BACKEND = {"cpu": "xnnpack", "npu": "qnn"}


def cell(unit: dict) -> tuple[str, bool]:
    """The cell's text, and whether the program verified."""
    v = unit.get("verification") or {}
    inputs = len(v.get("points") or [])
    # A decoder's program is judged on held-out text (v["tokens"]) and at one seeded input by design.
    few = f" ({inputs} in)" if 0 < inputs < 3 and not v.get("tokens") else ""
    if unit["status"] in ("built", "cached") and v.get("status") == "passed":
        return f"{v['metrics']['min_sqnr_db']:.1f}{few}", True
    if v.get("status") == "failed" and v.get("metrics"):
        return f"missed {v['metrics']['min_sqnr_db']:.1f}{few}", False
    return error_class(unit.get("failure")) or unit["status"], False


def refusals() -> dict[tuple[str, str, str], str]:
    """(architecture, unit, scheme) -> why the unit's backend refuses it at plan time, from the backend's own
    table (the architectures' model_type read from their tiny configs; nothing is built)."""
    import transformers

    from deployc.targets.backends import BACKENDS

    out = {}
    for arch in ARCHS:
        if arch.pytorchcv:  # no transformers model_type: none is refused by name
            continue
        model_type = arch.make(transformers).config.model_type
        for unit, scheme in COLUMNS:
            why = BACKENDS[BACKEND[unit]].refusal(model_type, scheme)
            if why:
                out[(arch.name, unit, scheme)] = why
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("reports", nargs="+", type=Path)
    args = parser.parse_args()
    names = {a.name for a in ARCHS}
    cells: dict[tuple[str, str, str], tuple[str, bool]] = {}
    for path in args.reports:
        for unit in json.loads(path.read_text())["units"]:
            arch, _, scheme = unit["model"].rpartition("_")
            if arch in names:
                cells[(arch, unit["unit"], scheme)] = cell(unit)
    for key in refusals():
        cells.setdefault(key, ("refused", False))
    print("| architecture | family | " + " | ".join(f"{u} {s}" for u, s in COLUMNS) + " |")
    print("|---|---|" + "---|" * len(COLUMNS))
    for arch in ARCHS:
        row = [cells.get((arch.name, u, s), ("-", False))[0] for u, s in COLUMNS]
        print(f"| {arch.name} | {arch.family} | " + " | ".join(row) + " |")
    print()
    for u, s in COLUMNS:
        ok = sum(cells.get((a.name, u, s), ("", False))[1] for a in ARCHS)
        print(f"{u} {s}: {ok}/{len(ARCHS)} verified")
    for u, schemes in INT8.items():
        ok = sum(any(cells.get((a.name, u, s), ("", False))[1] for s in schemes) for a in ARCHS)
        print(f"{u} in {' or '.join(schemes)}: {ok}/{len(ARCHS)} ({100 * ok / len(ARCHS):.1f}%)")


if __name__ == "__main__":
    main()
