"""`deployc inspect --self-test`: every program of a bundle run on its self-test vectors through the
ExecuTorch runtime, its outputs judged against the eager ones with the tolerances its build verified
(the runtime config's `verification.tolerance_*`). What the native runner's --self-test does too."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Literal

from deployc.core import self_test_vectors
from deployc.core.errors import RunError
from deployc.core.facts import PointMetrics, Summary, TaskMetrics, TextMetrics
from deployc.core.layout import RUNTIME_JSON
from deployc.core.records import Frozen
from deployc.graph.metrics import (
    compare,
    judge,
    judge_self_test_text,
    judge_task,
    summarize,
    task_metrics,
    text_metrics,
)
from deployc.targets.backends import BACKENDS


class SelfTestResult(Frozen):
    program: str
    backend: str
    status: Literal["passed", "failed", "not-run"]
    reason: str = ""
    cases: int = 0
    summary: Summary | None = None
    text: TextMetrics | None = None  # a decoder's held-out text cases (those with a `target`)
    task: TaskMetrics | None = None  # the manifest's task samples (cases with a `task`)
    min_cosine: float = 0.0  # the tolerances applied
    min_sqnr_db: float = 0.0
    max_perplexity_ratio: float = 0.0  # 0: no text tolerance
    max_kl: float = 0.0
    min_top1: float = 0.0  # a decoder's on held-out text, or a classifier's on its task samples
    min_topk_overlap: float = 0.0  # an embedder's on its task samples


def run_self_test(folder: Path) -> list[SelfTestResult]:
    from deployc.runtime.pipeline_runner import Bundle

    config = json.loads((folder / RUNTIME_JSON).read_text())
    vectors = {a["name"]: a["file"] for a in config.get("assets", []) if a["kind"] == "self_test"}
    bundle = Bundle(folder)
    results = []
    for p in config["programs"]:
        v = p["verification"]
        base = SelfTestResult(program=p["name"], backend=p["backend"], status="not-run",
                              min_cosine=v.get("tolerance_min_cosine", 0.0),
                              min_sqnr_db=v.get("tolerance_min_sqnr_db", 0.0),
                              max_perplexity_ratio=v.get("tolerance_max_perplexity_ratio", 0.0),
                              max_kl=v.get("tolerance_max_kl", 0.0), min_top1=v.get("tolerance_min_top1", 0.0),
                              min_topk_overlap=v.get("tolerance_min_topk_overlap", 0.0))
        file = vectors.get(f"{p['name']}.self_test")
        here = BACKENDS[p["backend"]].runs_here(os.environ) if p["backend"] in BACKENDS else None
        if file is None:
            results.append(base.model_copy(update={"reason": "no self-test vectors in the bundle"}))
        elif here is None or not here.usable:
            reason = here.reason if here is not None else f"unknown backend {p['backend']}"
            results.append(base.model_copy(update={"reason": f"not run on this host: {reason}"}))
        else:
            results.append(_check(bundle, base, self_test_vectors.read(folder / file)))
    return results


def _check(bundle: Any, base: SelfTestResult, cases: list[dict[str, Any]]) -> SelfTestResult:
    points = []
    positions = []  # held-out text: (eager logits, the program's, the next token)
    samples: list[tuple[Any, Any]] = []  # task samples: (eager's first output, the program's)
    measure: dict[str, Any] = {}
    for case in cases:
        inputs = [self_test_vectors.decode_tensor(t) for t in case["inputs"]]
        try:
            outputs = bundle.call(base.program, inputs, case["method"])
        except RunError as exc:
            return base.model_copy(update={"status": "failed", "reason": str(exc), "cases": len(cases)})
        expected = [self_test_vectors.decode_tensor(t) for t in case["expected"]]
        if len(outputs) != len(expected):
            return base.model_copy(update={"status": "failed", "cases": len(cases),
                                           "reason": f"{len(outputs)} outputs, the vectors hold {len(expected)}"})
        if "target" in case:
            positions.append((expected[0], outputs[0], int(case["target"])))
            continue
        if "task" in case:
            measure = case["task"]
            samples.append((expected[0], outputs[0]))
            continue
        points.append(PointMetrics(method=case["method"], dims=case["dims"],
                                   outputs=[compare(e, o) for e, o in zip(expected, outputs)]))
    summary = summarize(points)
    missed = judge(summary, base.min_cosine, base.min_sqnr_db, None)
    text = None
    if positions:
        try:
            text = text_metrics("self-test", positions)
        except ValueError as exc:
            missed.append(str(exc))
        if text is not None and base.max_perplexity_ratio:
            missed += judge_self_test_text(text, base.max_kl, base.min_top1)
    task = None
    if samples:
        try:
            task = task_metrics("self-test", measure["measure"], int(measure.get("k", 0)),
                                [e for e, _ in samples], [o for _, o in samples])
        except ValueError as exc:
            missed.append(str(exc))
        if task is not None:
            missed += judge_task(task, base.min_top1 or None, base.min_topk_overlap or None)
    return base.model_copy(update={"status": "failed" if missed else "passed", "reason": "; ".join(missed),
                                   "cases": len(cases), "summary": summary, "text": text, "task": task})


def run_self_test_arm64(folder: Path, runner: Any, cpu: str) -> list[SelfTestResult]:
    """The same check by the arm64 native runner under qemu-aarch64 (targets/arm64_runner.py), emulating
    `cpu`: its `--self-test` rows in this module's terms. QNN and other delegates are not in the aarch64
    wheel: their programs are not-run, with that reason."""
    doc = runner.self_test(folder, cpu)
    config = json.loads((folder / RUNTIME_JSON).read_text())
    tolerances = {p["name"]: p["verification"] for p in config["programs"]}
    results = []
    for row in doc["programs"]:
        v = tolerances.get(row["program"], {})
        t = row.get("text")
        results.append(SelfTestResult(
            program=row["program"], backend=row["backend"], status=row["status"],
            reason=(f"on arm64 ({cpu}, qemu): " if row["reason"] else "") + row["reason"], cases=row["cases"],
            summary=Summary(max_abs=row["max_abs"], min_cosine=row["min_cosine"], min_sqnr_db=row["min_sqnr_db"])
            if "min_cosine" in row else None,
            text=TextMetrics(file="self-test", positions=t["positions"], perplexity=t["perplexity"],
                             reference_perplexity=t["reference_perplexity"], kl=t["kl"], top1=t["top1"],
                           top1_positions=t.get("top1_positions")) if t else None,
            task=TaskMetrics.model_validate({"file": "self-test", **row["task"]}) if row.get("task") else None,
            min_cosine=row["tolerance_min_cosine"], min_sqnr_db=row["tolerance_min_sqnr_db"],
            max_perplexity_ratio=v.get("tolerance_max_perplexity_ratio", 0.0), max_kl=v.get("tolerance_max_kl", 0.0),
            min_top1=v.get("tolerance_min_top1", 0.0), min_topk_overlap=v.get("tolerance_min_topk_overlap", 0.0)))
    return results
