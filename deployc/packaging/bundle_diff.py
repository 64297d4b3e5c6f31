"""What changed between two bundles: files, sizes, and per-program verification metrics."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from deployc.core.layout import LOCK_FILE, RUNTIME_JSON

METRICS = ("min_cosine", "min_sqnr_db", "max_abs")


def _lock(folder: Path) -> dict[str, Any]:
    return json.loads((folder / LOCK_FILE).read_text())


def _programs(folder: Path) -> dict[str, dict[str, Any]]:
    config = json.loads((folder / RUNTIME_JSON).read_text())
    return {p["name"]: p for p in config["programs"]}


def diff_bundles(a: Path, b: Path) -> dict[str, Any]:
    fa, fb = _lock(a)["files"], _lock(b)["files"]
    files = []
    for name in sorted(set(fa) | set(fb)):
        if name not in fb:
            files.append({"file": name, "change": "removed", "size_a": fa[name]["size"], "size_b": None})
        elif name not in fa:
            files.append({"file": name, "change": "added", "size_a": None, "size_b": fb[name]["size"]})
        elif fa[name]["sha256"] != fb[name]["sha256"]:
            files.append({"file": name, "change": "changed", "size_a": fa[name]["size"], "size_b": fb[name]["size"]})
    pa, pb = _programs(a), _programs(b)
    programs = []
    for name in sorted(set(pa) & set(pb)):
        va, vb = pa[name]["verification"], pb[name]["verification"]
        changes = {k: [pa[name][k], pb[name][k]] for k in ("backend", "quantization", "size_bytes", "unit")
                   if pa[name][k] != pb[name][k]}
        fmt = [pa[name].get("format", "pte"), pb[name].get("format", "pte")]  # absent: an ExecuTorch .pte
        if fmt[0] != fmt[1]:
            changes["format"] = fmt
        ops = [pa[name]["methods"][0]["operators"], pb[name]["methods"][0]["operators"]]
        if ops[0] != ops[1]:
            changes["operators"] = [len(ops[0]), len(ops[1])]  # counts: the lists are long; inspect shows them
        changes.update({f"verification.{k}": [va[k], vb[k]] for k in ("status", *METRICS) if va[k] != vb[k]})
        if changes:
            programs.append({"program": name, "changes": changes})
    return {"a": str(a), "b": str(b), "files": files, "programs": programs,
            "programs_added": sorted(set(pb) - set(pa)), "programs_removed": sorted(set(pa) - set(pb)),
            "identical": not files}
