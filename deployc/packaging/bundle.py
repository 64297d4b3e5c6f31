"""Assemble one target's bundle: programs, runtime config, lock file, and a deterministic archive.

The directory is assembled beside its final place and renamed into it, so an interrupted build never
leaves a directory that looks complete. Nothing time- or machine-dependent goes in (no timestamps,
no latencies, no absolute paths): two clean builds give the same bytes.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import deployc
from deployc.build import UnitResult
from deployc.fingerprint import file_sha256
from deployc.packaging.archive import write_archive
from deployc.plan import BuildPlan, TargetPlan
from deployc.project import Project

BUNDLE_SCHEMA_VERSION = 1
RUNTIME_JSON = "runtime.json"
LOCK_FILE = "bundle.lock.json"


def _dump(data: Any) -> str:
    return json.dumps(data, indent=2, sort_keys=True) + "\n"


def _rounded(metrics: dict[str, float]) -> dict[str, float]:
    # Rounded so that last-bit noise in a rebuild cannot change the bundle's bytes.
    return {k: round(v, 4) for k, v in metrics.items()}


def _program_entry(r: UnitResult, file: str, sha256: str) -> dict[str, Any]:
    rep = r.report
    dims = {d["name"]: {"min": d["min"], "max": d["max"]} for d in rep["dims"]}
    inputs = [{"name": i["name"], "dtype": i["dtype"], "shape": i["shape"],
               "dynamic": {s: dims[s] for s in i["shape"] if isinstance(s, str)}} for i in rep["inputs"]]
    methods = {name: {"inputs": inputs, "outputs": rep["outputs"],
                      "planned_memory_bytes": m["planned_memory_bytes"], "operators": m["operators"],
                      "delegates": m["delegates"]}
               for name, m in rep["methods"].items()}
    v = r.verification
    return {
        "name": r.unit.model, "file": file, "sha256": sha256, "size_bytes": rep["size_bytes"],
        "unit": r.unit.unit, "backend": r.unit.backend, "backends": sorted(rep["delegates"]) or ["portable"],
        "quantization": r.unit.quantization, "threads": r.unit.threads, "warmup": r.unit.warmup,
        "methods": methods,
        "verification": {"status": v["status"], "reason": v.get("reason", ""),
                         "metrics": _rounded(v["metrics"]) if "metrics" in v else {},
                         "tolerance": v["tolerance"]},
    }


def write_bundle(plan: BuildPlan, target: TargetPlan, results: list[UnitResult], project: Project,
                 out_dir: Path) -> dict[str, str]:
    m = plan.manifest
    release = out_dir / m.name / m.version
    release.mkdir(parents=True, exist_ok=True)
    final = release / target.target
    staging = Path(tempfile.mkdtemp(dir=release, prefix=f".{target.target}.tmp-"))
    try:
        programs = []
        for r in sorted(results, key=lambda r: r.unit.model):
            assert r.program is not None
            file = f"{r.unit.model}.pte"
            shutil.copyfile(r.program, staging / file)
            programs.append(_program_entry(r, file, file_sha256(staging / file)))
        config = {
            "schema_version": BUNDLE_SCHEMA_VERSION, "deployc_version": deployc.__version__,
            "bundle": {"name": m.name, "version": m.version, "target": target.target, "profile": target.profile},
            "device": target.device, "programs": programs, "pipeline": None,
        }
        (staging / RUNTIME_JSON).write_text(_dump(config))
        files = {p.relative_to(staging).as_posix(): {"sha256": file_sha256(p), "size": p.stat().st_size}
                 for p in sorted(staging.rglob("*")) if p.is_file()}
        lock = {
            "schema_version": BUNDLE_SCHEMA_VERSION,
            "bundle": config["bundle"],
            "files": files,
            "manifest": {"file": m.path, "sha256": m.sha256},
            "profile": {"name": target.profile, "sha256": target.profile_sha256},
            "tools": plan.toolchain,
            "units": {r.unit.model: {"program_key": r.unit.program_key, "unit": r.unit.unit,
                                     "steps": {s.step: s.key for s in r.unit.steps}} for r in results},
        }
        (staging / LOCK_FILE).write_text(_dump(lock))
        for p in staging.rglob("*"):
            p.chmod(0o755 if p.is_dir() else 0o644)
        staging.chmod(0o755)
        archive = release / f"{m.name}-{m.version}-{target.target}.tar.gz"
        write_archive(staging, target.target, archive)
        _replace_dir(staging, final)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return {"dir": str(final), "archive": str(archive)}


def _replace_dir(staging: Path, final: Path) -> None:
    if final.exists():
        old = final.with_name(f".{final.name}.old-{os.getpid()}")
        os.replace(final, old)
        os.replace(staging, final)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(staging, final)
