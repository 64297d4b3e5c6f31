"""Programs for an arm64 device's CPU, checked on arm64 kernels: each program that passed its verification
on this x86 host is run again by ExecuTorch's arm64 runtime under qemu-aarch64 (targets/arm64_runner.py) on
its self-test vectors (the verification points, eager PyTorch's outputs) and judged with the unit's own
tolerances. A miss fails the unit. Measurements are cached by program key and runner identity: the same
program on the same runner and emulated CPU gives the same numbers.

Runs in the build's driver process (no torch): one qemu process per program.
"""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path
from typing import Any

from deployc.build.cache import Cache
from deployc.build.results import Arm64Check, Failure, UnitResult
from deployc.core.digests import key_of
from deployc.core.events import Say
from deployc.core.facts import PROGRAM_DATA_FILE, Summary, TextMetrics
from deployc.core.self_test_vectors import SELF_TEST_FILE
from deployc.graph.metrics import judge, judge_text

MEASURED_FILE = "arm64.json"
SKIPPED = "skipped: deployc build --no-emulate"


def _wanted(r: UnitResult) -> bool:
    return (r.status != "failed" and r.verification is not None and r.verification.status == "passed"
            and bool(r.unit.verify.arm64_cpu) and r.program is not None)


def _cases(vectors: Path, points: list[dict[str, int]] | None, into: Path) -> Path:
    """The self-test vectors the check runs: every case but a verification point's outside `points` (None: all).
    The held-out text's and task samples' cases are always kept (they carry the figures the unit is gated on)."""
    if points is None:
        return vectors
    doc = json.loads(vectors.read_text())
    doc["cases"] = [c for c in doc["cases"] if "target" in c or "task" in c or c["dims"] in points]
    into.write_text(json.dumps(doc, sort_keys=True))
    return into


def _measure(runner: Any, cache: Cache, r: UnitResult) -> tuple[dict[str, Any], float | None]:
    """The runner's measurement of the unit's program: (document, seconds it took; None: from the cache)."""
    cpu, points = r.unit.verify.arm64_cpu, r.unit.verify.arm64_points
    store = cache.of_kind("arm64")
    key = key_of(r.unit.program_key, runner.identity, cpu, *([points] if points is not None else []))
    entry, _ = store.get(key)
    if entry is not None:
        return json.loads(entry.file(MEASURED_FILE).read_text()), None
    assert r.program is not None
    runner.probe()
    folder = Path(r.program).parent
    data = folder / PROGRAM_DATA_FILE
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="deployc-arm64-") as tmp:
        vectors = _cases(folder / SELF_TEST_FILE, points, Path(tmp) / SELF_TEST_FILE)
        doc = runner.measure(Path(r.program), vectors, data if data.is_file() else None, cpu)
    if doc.get("status") != "measured":  # a crash may be the machine's (memory, a signal): run it again next time
        return doc, round(time.perf_counter() - start, 2)
    with store.lock(key):
        if store.get(key)[0] is None:
            staging = store.tmp_dir()
            (staging / MEASURED_FILE).write_text(json.dumps(doc, sort_keys=True))
            store.put(key, staging)
    return doc, round(time.perf_counter() - start, 2)


def _judged(r: UnitResult, doc: dict[str, Any], seconds: float | None) -> UnitResult:
    cached = seconds is None
    v, cpu = r.unit.verify, r.unit.verify.arm64_cpu
    left_out = [p for p in v.points if v.arm64_points is not None and p not in v.arm64_points]
    where = f"on arm64 (ExecuTorch's aarch64 runtime under qemu-aarch64 -cpu {cpu})"
    if doc.get("status") != "measured":
        check = Arm64Check(status="failed", reason=doc.get("reason", ""), cpu=cpu, cases=doc.get("cases", 0),
                           left_out=left_out, cached=cached, seconds=seconds or 0.0)
        return r.model_copy(update={"arm64": check, "status": "failed", "failure": Failure(
            step="verify-arm64", error=f"{where}: {check.reason}")})
    summary = Summary(max_abs=doc["max_abs"], min_cosine=doc["min_cosine"], min_sqnr_db=doc["min_sqnr_db"])
    missed = judge(summary, v.min_cosine, v.min_sqnr_db, v.max_abs) if doc["cases"] else []
    text = None
    if "text" in doc:
        t = doc["text"]  # the held-out text's start, as far as the self-test vectors carry it
        text = TextMetrics(file="self-test", positions=t["positions"], perplexity=t["perplexity"],
                           reference_perplexity=t["reference_perplexity"], kl=t["kl"], top1=t["top1"],
                           top1_positions=t.get("top1_positions"))
        if v.max_perplexity_ratio is not None and v.max_kl is not None and v.min_top1 is not None:
            missed += judge_text(text, v.max_perplexity_ratio, v.max_kl, v.min_top1)
    check = Arm64Check(status="failed" if missed else "passed", reason="; ".join(missed), cpu=cpu,
                       cases=doc["cases"], left_out=left_out, metrics=summary, text=text, cached=cached,
                       seconds=seconds or 0.0)
    if not missed:
        return r.model_copy(update={"arm64": check})
    return r.model_copy(update={"arm64": check, "status": "failed", "failure": Failure(
        step="verify-arm64", error=f"{where}, verification against eager PyTorch missed: " + "; ".join(missed))})


def check(results: dict[str, UnitResult], cache: Cache, emulate: bool, say: Say) -> dict[str, UnitResult]:
    """Every unit whose program is for an arm64 CPU gets its `arm64` check (passed, failed or not-run)."""
    wanted = [label for label, r in results.items() if _wanted(r)]
    if not wanted:
        return results
    checked = dict(results)
    if not emulate:
        for label in wanted:
            r = results[label]
            checked[label] = r.model_copy(update={"arm64": Arm64Check(status="not-run", reason=SKIPPED,
                                                                      cpu=r.unit.verify.arm64_cpu)})
        return checked
    from deployc.targets import arm64_runner

    # A program shared by targets runs once.
    measured: dict[tuple[str, str], tuple[dict[str, Any], float | None]] = {}
    try:
        runner = arm64_runner.prepare(say)
        for label in wanted:
            r = results[label]
            at = (r.unit.program_key, r.unit.verify.arm64_cpu)
            if at not in measured:
                measured[at] = _measure(runner, cache, r)
                seconds = measured[at][1]
                if seconds is not None:
                    say(f"{r.unit.label}: checked on arm64 ({r.unit.verify.arm64_cpu}, qemu) in {seconds:.1f} s")
            checked[label] = _judged(r, *measured[at])
    except arm64_runner.Unavailable as exc:
        for label in wanted:
            r = results[label]
            if checked[label].arm64 is None:
                checked[label] = r.model_copy(update={"arm64": Arm64Check(
                    status="not-run", reason=f"no arm64 runner on this machine: {exc}", cpu=r.unit.verify.arm64_cpu)})
    return checked
