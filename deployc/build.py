"""Execute a BuildPlan: build each distinct program once (worker processes, through the cache),
judge every unit against its own tolerances and budgets, then package one bundle per target.

The parent process never imports torch: a no-op rebuild only hashes cached files and packages.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from deployc.cache import Cache, Entry
from deployc.graph.metrics import judge
from deployc.executors import Executor
from deployc.graph.program_builder import PROGRAM_FILE, REPORT_FILE
from deployc.plan import BuildPlan, UnitPlan
from deployc.project import Project
from deployc.schema_base import format_size

Progress = Callable[[str], None]


@dataclass
class UnitResult:
    unit: UnitPlan
    status: str  # built | cached | failed
    step: str | None = None
    error: str | None = None
    report: dict[str, Any] = field(default_factory=dict)
    verification: dict[str, Any] = field(default_factory=dict)
    program: Path | None = None
    node: dict[str, Any] | None = None  # where it was built (None: taken from the cache)
    attempts: int = 0

    def to_json(self) -> dict[str, Any]:
        r = self.report
        methods = r.get("methods", {})
        return {
            "model": self.unit.model, "target": self.unit.target, "unit": self.unit.unit,
            "backend": self.unit.backend, "quantization": self.unit.quantization, "status": self.status,
            "program_key": self.unit.program_key,
            "pte": str(self.program) if self.program else None,
            "size_bytes": r.get("size_bytes"),
            "planned_memory_bytes": {m: v["planned_memory_bytes"] for m, v in methods.items()},
            "delegated_share": r.get("delegated_share"),
            "delegates": r.get("delegates"),
            "non_delegated_ops": r.get("non_delegated_ops"),
            "verification": self.verification,
            "latency_ms": r.get("verification", {}).get("latency_ms"),
            "durations_s": r.get("durations_s"),
            "built_on": self.node,
            "attempts": self.attempts,
            "failure": {"step": self.step, "error": self.error} if self.status == "failed" else None,
        }


@dataclass
class BuildReport:
    units: list[UnitResult]
    bundles: dict[str, dict[str, str]]  # target -> {"dir": ..., "archive": ...}
    skipped_bundles: dict[str, str]  # target -> why no bundle was written

    @property
    def failed(self) -> list[UnitResult]:
        return [u for u in self.units if u.status == "failed"]

    def to_json(self) -> dict[str, Any]:
        return {"units": [u.to_json() for u in self.units], "bundles": self.bundles,
                "bundles_not_written": self.skipped_bundles, "ok": not self.failed}


def _budget_problems(unit: UnitPlan, report: dict[str, Any]) -> list[str]:
    limits = unit.step_of("budget").limits
    size = report["size_bytes"]
    planned = max((m["planned_memory_bytes"] for m in report["methods"].values()), default=0)
    usage = {"storage": size, "flash": size, "ram": size + planned, "sram": planned}
    what = {"storage": "program size", "flash": "program size", "ram": "program + planned memory",
            "sram": "planned activation memory"}
    return [f"{what[k]} {format_size(usage[k])} ({usage[k]} B) exceeds the {k} budget {format_size(v)} ({v} B) "
            f"of unit '{unit.unit}' on target '{unit.target}'"
            for k, v in sorted(limits.items()) if usage[k] > v]


def _declared_output_problems(unit: UnitPlan, report: dict[str, Any]) -> str | None:
    """The manifest's `outputs` (when declared) must match what the program returns."""
    package = unit.step_of("package")
    dims = {d["name"]: d for d in report["dims"]}
    for method, declared in [("forward", package.outputs), *package.method_outputs.items()]:
        problem = _compare_outputs(method, declared, report["signatures"][method]["outputs"], dims)
        if problem:
            return problem
    return None


def _compare_outputs(method: str, declared: list[Any], actual: list[dict[str, Any]],
                     dims: dict[str, Any]) -> str | None:
    if not declared:
        return None
    where = "the model" if method == "forward" else f"method {method}"
    if len(actual) != len(declared):
        return f"{where} returns {len(actual)} output(s); the manifest declares {len(declared)}"
    for d, a in zip(declared, actual):
        if len(d.shape) != len(a["shape"]) or d.dtype != a["dtype"]:
            return f"output {d.name}: declared {d.dtype}{d.shape}, {where} returns {a['dtype']}{a['shape']}"
        for want, got in zip(d.shape, a["shape"]):
            if isinstance(want, int) and want != got:
                return f"output {d.name}: declared {d.dtype}{d.shape}, {where} returns {a['dtype']}{a['shape']}"
            if isinstance(want, str) and want not in dims:
                return f"output {d.name}: dim '{want}' is not one of the model's dims"
    return None


def _judge(unit: UnitPlan, result: dict[str, Any], entry: Entry | None) -> UnitResult:
    node, attempts = result.get("node"), result.get("attempts", 0)
    if result.get("status") == "failed":
        return UnitResult(unit, "failed", result.get("step"), result.get("error"), node=node, attempts=attempts)
    if entry is None:
        return UnitResult(unit, "failed", "cache", "the built program vanished from the cache", node=node,
                          attempts=attempts)
    report = json.loads(entry.file(REPORT_FILE).read_text())
    v = unit.step_of("verify")
    tolerance = {"min_cosine": v.min_cosine, "min_sqnr_db": v.min_sqnr_db, "max_abs": v.max_abs}
    measured = report["verification"]
    status, step, error = result["status"], None, None
    if not v.run:
        verification = {"status": "not-run", "reason": v.reason, "tolerance": tolerance}
    elif measured["status"] != "measured":
        verification = {"status": "failed", "reason": measured.get("reason", ""), "tolerance": tolerance}
        status, step, error = "failed", "verify", measured.get("reason", "")
    else:
        missed = judge(measured["summary"], v.min_cosine, v.min_sqnr_db, v.max_abs)
        verification = {"status": "failed" if missed else "passed", "metrics": measured["summary"],
                        "points": measured["points"], "tolerance": tolerance}
        if missed:
            status, step, error = "failed", "verify", "verification against eager PyTorch missed: " + "; ".join(missed)
    mismatch = _declared_output_problems(unit, report)
    if mismatch and status != "failed":
        status, step, error = "failed", "outputs", mismatch
    over = _budget_problems(unit, report)
    if over and status != "failed":
        status, step, error = "failed", "budget", "; ".join(over)
    return UnitResult(unit, status, step, error, report, verification, entry.file(PROGRAM_FILE), node, attempts)


def build(plan: BuildPlan, project: Project, cache: Cache, executor: Executor, progress: Progress,
          warn: Progress) -> dict[str, UnitResult]:
    """Build every distinct program (or find it cached); judge every unit."""
    programs = plan.programs()
    results: dict[str, dict[str, Any]] = {}
    todo = []
    for key, unit in programs.items():
        entry, warning = cache.get(key)
        if warning:
            warn(warning)
        if entry is not None:
            results[key] = {"key": key, "status": "cached"}
        else:
            todo.append(unit)
    if todo:
        progress(f"building {len(todo)} program(s) with {executor.describe(len(todo))}; "
                 f"{len(programs) - len(todo)} cached")
        t = time.perf_counter()
        built = executor.run(todo, project, cache, progress)
        for key, r in built.items():
            if r.get("warning"):
                warn(r["warning"])
        results.update(built)
        progress(f"built in {time.perf_counter() - t:.1f} s")
    # One verified read per program, however many targets share it (a MiniLM program is 58 MB to hash).
    entries = {key: cache.get(key)[0] if results[key].get("status") != "failed" else None for key in programs}
    for entry in entries.values():
        if entry is not None:
            cache.publish(entry)  # what local workers built reaches a shared cache too
    return {f"{u.model}@{u.target}": _judge(u, results[u.program_key], entries[u.program_key])
            for u in plan.units()}
