"""Run a built program through the ExecuTorch runtime, in a child process, on the same inputs the
eager model saw, and measure how far its outputs are from eager's.

The child starts before lowering (its imports then overlap with it) and waits for its job on stdin.
A runtime crash kills only the child; the unit reports it."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from deployc.core.facts import (
    Measurement,
    MethodCalls,
    PointMetrics,
    SizeRange,
    TaskMetrics,
    TensorFacts,
    TokenParity,
)
from deployc.core.static_decoder import StaticDecoderLayout
from deployc.graph import verify_worker
from deployc.graph.metrics import compare, summarize, task_metrics
from deployc.plan.build_plan import TaskData

VERIFY_TIMEOUT_S = 900
# ExecuTorch's error codes (runtime/core/error.h); its Python runtime says only "error: 0x:23".
RUNTIME_ERRORS = {0x01: "Internal", 0x02: "InvalidState", 0x03: "EndOfMethod", 0x04: "AlreadyLoaded",
                  0x10: "NotSupported", 0x11: "NotImplemented", 0x12: "InvalidArgument", 0x13: "InvalidType",
                  0x14: "OperatorMissing", 0x20: "NotFound", 0x21: "MemoryAllocationFailed", 0x22: "AccessFailed",
                  0x23: "InvalidProgram", 0x24: "InvalidExternalData", 0x25: "OutOfResources",
                  0x30: "DelegateInvalidCompatibility", 0x31: "DelegateMemoryAllocationFailed",
                  0x32: "DelegateInvalidHandle"}
# What the runtime and its delegates log ("[method.cpp:602] ...", "[ERROR] [Qnn ExecuTorch]: ..."), and
# what they log on every run, harmless: cpuinfo on this host's /sys, QNN 2.51 on a setting of 2.37's.
_LOGGED = re.compile(r"^\[(ERROR\]|[\w./-]+\.(cpp|cc|c|h):\d+\])")
_HARMLESS = ("[cpuinfo_utils.cpp", "unexpected GraphHtpSettings option")
_CODE = re.compile(r"error: 0x:?([0-9a-fA-F]+)")

Check = tuple[str, dict[str, int], list[Any]]  # (method, dims, inputs): one call at one verification point


def start_verifier(niceness: int = 0) -> subprocess.Popen[str]:
    """niceness: the backend's host_niceness (an emulator's threads yield to the lowering beside them)."""
    from deployc.graph.host_runtime import child_env

    return subprocess.Popen([sys.executable, "-m", verify_worker.__name__], stdin=subprocess.PIPE,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, **child_env(niceness)})


def crash_reason(stderr: str, code: int) -> str:
    """Why the runtime's process died: the first lines the runtime or a delegate logged as errors (the
    cause; what follows is teardown), then the exception it ended with, its error code named."""
    lines = [line.strip() for line in stderr.strip().splitlines() if line.strip()]
    logged = [line for line in lines if _LOGGED.match(line) and not any(h in line for h in _HARMLESS)][:2]
    last = next((line for line in reversed(lines) if not line.startswith(("[INFO]", "[WARNING]"))), "")
    found = _CODE.search(last)
    if found and int(found.group(1), 16) in RUNTIME_ERRORS:
        last += f" ({RUNTIME_ERRORS[int(found.group(1), 16)]})"
    how = f"killed by signal {-code}" if code < 0 else f"exit code {code}"
    said = " | ".join(dict.fromkeys(line for line in [*logged, last] if line))
    return f"executorch.runtime crashed ({how})" + (f": {said[:600]}" if said else "")


def output_facts(references: list[list[Any]]) -> list[TensorFacts]:
    """Per output of one method: dtype and shape; a size that varies across the checked points becomes a range."""
    out = []
    for i, first in enumerate(references[0]):
        sizes = [list(p[i].shape) for p in references]
        shape: list[int | str | SizeRange] = []
        for axis in range(len(sizes[0])):
            values = {s[axis] for s in sizes}
            shape.append(values.pop() if len(values) == 1 else SizeRange(min=min(s[axis] for s in sizes),
                                                                          max=max(s[axis] for s in sizes)))
        out.append(TensorFacts(name=f"output_{i}", dtype=str(first.dtype).removeprefix("torch."), shape=shape))
    return out


@dataclass
class Calls:
    """What a program is judged on: the calls eager made at the verification points (and on text and task
    samples) with what each returned, and which of them are judged how. `sequences`: per prompt, the
    indexes of the checks that generate from it (text-generation programs), compared by the tokens they
    choose. `texts`: per held-out window, the indexes of its checks and the token each should predict,
    compared as next-token distributions over all of them and over the first `self_test_positions` (those
    the self-test vectors carry). `task`: the checks that are the manifest's task samples, judged by the
    task measure. The other checks by the metrics."""

    checks: list[Check]
    references: list[list[Any]]
    sequences: list[list[int]] = field(default_factory=list)
    texts: list[tuple[list[int], list[int]]] = field(default_factory=list)
    text_file: str = ""
    self_test_positions: int = 0
    task: TaskChecks | None = None

    def judged_apart(self) -> set[int]:
        """The checks not judged by the metrics: generated, scored on text, or task samples."""
        return ({i for s in self.sequences for i in s} | {i for window, _ in self.texts for i in window}
                | set(self.task.checks if self.task else []))


def verify(program: Path, calls: Calls, verifier: subprocess.Popen[str], log: Any = None, data: Path | None = None,
           static: StaticDecoderLayout | None = None) -> Measurement:
    """Run `program` (and its external `data`) in the waiting `verifier` on `calls` and measure it against
    eager. `static`: the program is a decoder in the static form, its `forward` calls made through the
    driver (pipeline/host/static_decoding.py), as an app makes them."""
    ran = _run(program, calls, verifier, log, data, static)
    return ran if isinstance(ran, Measurement) else _measured(calls, ran)


def _run(program: Path, calls: Calls, verifier: subprocess.Popen[str], log: Any, data: Path | None,
         static: StaticDecoderLayout | None) -> dict[str, Any] | Measurement:
    """What the runtime returned for every call (and its timings), or why it did not."""
    import torch

    apart = calls.judged_apart()
    forward = [i for i, (method, _, _) in enumerate(calls.checks) if method == "forward" and i not in apart]
    with tempfile.TemporaryDirectory(prefix="deployc-verify-") as tmp:
        inputs_path, outputs_path = Path(tmp) / "inputs.pt", Path(tmp) / "outputs.pt"
        torch.save({"checks": [(method, inputs) for method, _, inputs in calls.checks],
                    # A static decoder's figure is a decode call's (seq 1, the first point): its middle point
                    # is several prefill calls, each of them as slow as the emulator makes them.
                    "timed": forward[0] if static else forward[len(forward) // 2],
                    "static_decoder": static.model_dump() if static else None}, inputs_path)
        try:
            job = f"{program} {inputs_path} {outputs_path}" + (f" {data}" if data else "")
            _, stderr = verifier.communicate(job + "\n", timeout=VERIFY_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            verifier.kill()
            verifier.wait()
            return Measurement(status="error", reason=f"the runtime did not finish within {VERIFY_TIMEOUT_S} s")
        if log is not None and stderr:
            log.write(stderr)
        if verifier.returncode != 0:
            return Measurement(status="error", reason=crash_reason(stderr, verifier.returncode))
        result: dict[str, Any] = torch.load(outputs_path, weights_only=True)
        return result


def _measured(calls: Calls, result: dict[str, Any]) -> Measurement:
    from deployc.graph.metrics import text_metrics

    outputs = result["outputs"]
    apart = calls.judged_apart()
    measured = []
    for i, ((method, size, _), ref, got) in enumerate(zip(calls.checks, calls.references, outputs)):
        if i in apart:
            continue
        if len(ref) != len(got):
            return Measurement(status="error", reason=f"program returned {len(got)} outputs, eager {len(ref)}")
        try:
            metrics = [compare(r.float().numpy(), g.float().numpy()) for r, g in zip(ref, got)]
        except ValueError as exc:
            return Measurement(status="error", reason=f"at {size}: {exc}")
        measured.append(PointMetrics(method=method, dims=size, outputs=metrics))
    text = shipped = None
    if calls.texts:
        positions = _scored_positions(calls, outputs)
        try:
            text = text_metrics(calls.text_file, positions)
            shipped = (text_metrics("self-test", positions[:calls.self_test_positions])
                       if calls.self_test_positions else None)
        except ValueError as exc:
            return Measurement(status="error", reason=str(exc))
    try:
        measured_task = task_measure(calls.task, calls.references, outputs) if calls.task else None
    except ValueError as exc:
        return Measurement(status="error", reason=str(exc))
    return Measurement(status="measured", points=measured, summary=summarize(measured),
                       tokens=_token_parity(calls, outputs), text=text, self_test_text=shipped, task=measured_task,
                       latency_ms=round(result["latency_ms"], 4), load_s=round(result["load_s"], 4),
                       method_calls={name: MethodCalls(calls=n, seconds=round(seconds, 3))
                                     for name, (n, seconds) in result.get("method_calls", {}).items()})


def _token_parity(calls: Calls, outputs: list[list[Any]]) -> TokenParity | None:
    from deployc.graph.parity import leading_matches

    sequences, references = calls.sequences, calls.references
    if not sequences:
        return None
    leading = [leading_matches([references[i] for i in s], [outputs[i] for i in s]) for s in sequences]
    # Tokens per sequence: eager's rows of logits (a call each, or one `score` call of them all).
    lengths = [sum(references[i][0].reshape(-1, references[i][0].shape[-1]).shape[0] for i in s) for s in sequences]
    return TokenParity(prompts=len(sequences), generated=max(lengths), matched=min(leading),
                       identical=sum(n == length for n, length in zip(leading, lengths)))


def _scored_positions(calls: Calls, outputs: list[list[Any]]) -> list[tuple[Any, Any, int]]:
    """Per held-out position: eager's logits, the program's, the token that came next. A call scores its last
    position, or (a static decoder's `score`) every one of them."""
    positions = []
    for window, targets in calls.texts:
        refs = [row for i in window for row in calls.references[i][0].reshape(-1, calls.references[i][0].shape[-1])]
        gots = [row for i in window for row in outputs[i][0].reshape(-1, calls.references[i][0].shape[-1])]
        positions += list(zip(refs, gots, targets))
    return positions


@dataclass(frozen=True)
class TaskChecks:
    """Which checks are the task samples (Verify.data), and how they are measured."""

    checks: list[int]
    data: TaskData


def task_measure(task: TaskChecks, references: list[list[Any]], outputs: list[list[Any]]) -> TaskMetrics:
    """The task measure over the samples' first outputs: eager's against what ran."""
    return task_metrics(task.data.file, task.data.measure, task.data.topk,
                        [references[i][0].float().numpy() for i in task.checks],
                        [outputs[i][0].float().numpy() for i in task.checks])


def verify_reference(module: Any, calls: Calls, ran_on: str) -> Measurement:
    """The lowered graph (a PyTorch module whose operators are the backend's reference kernels) run on the
    verification points in this process, compared with eager like a program's outputs. What verifies
    a backend this host's runtime cannot run (Cortex-M): honest about what ran (`ran_on`)."""
    import torch

    task = calls.task
    measured: list[PointMetrics] = []
    outputs: list[list[Any]] = []
    with torch.no_grad():
        for (method, size, inputs), ref in zip(calls.checks, calls.references):
            try:
                got = module(*inputs)
            except Exception as exc:
                return Measurement(status="error", ran_on=ran_on,
                                   reason=f"the lowered graph failed on the {ran_on.split(';')[0]} at {size}: "
                                          f"{type(exc).__name__}: {str(exc)[:300]}")
            got = list(got) if isinstance(got, (tuple, list)) else [got]
            outputs.append(got)
            if len(ref) != len(got):
                return Measurement(status="error", ran_on=ran_on,
                                   reason=f"the lowered graph returned {len(got)} outputs, eager {len(ref)}")
            if task and len(outputs) - 1 in task.checks:
                continue
            metrics = [compare(r.float().numpy(), g.float().numpy()) for r, g in zip(ref, got)]
            measured.append(PointMetrics(method=method, dims=size, outputs=metrics))
    try:
        measured_task = task_measure(task, calls.references, outputs) if task else None
    except ValueError as exc:
        return Measurement(status="error", ran_on=ran_on, reason=str(exc))
    return Measurement(status="measured", points=measured, summary=summarize(measured), ran_on=ran_on,
                       task=measured_task)
