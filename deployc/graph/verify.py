"""Run a built program through the ExecuTorch runtime, in a child process, on the same inputs the
eager model saw, and measure how far its outputs are from eager's.

The child starts before lowering (its imports then overlap with it) and waits for its job on stdin.
A runtime crash kills only the child; the unit reports it."""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from deployc.core.facts import (
    Measurement,
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


def start_verifier() -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", verify_worker.__name__], stdin=subprocess.PIPE,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


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


def verify(pte: Path, checks: list[Check], references: list[list[Any]], verifier: subprocess.Popen[str],
           log: Any = None, sequences: list[list[int]] | None = None, data: Path | None = None,
           texts: list[tuple[list[int], list[int]]] | None = None, text_file: str = "",
           self_test_positions: int = 0, static: StaticDecoderLayout | None = None,
           task: TaskChecks | None = None) -> Measurement:
    """`sequences`: per prompt, the indexes of the checks that generate from it (text-generation
    programs); they are compared by the tokens they choose. `texts`: per held-out window, the indexes of
    its checks and the token each should predict; compared as next-token distributions, over all of them
    and over the first `self_test_positions` (those the self-test vectors carry). The other checks by
    the metrics. `static`: the program is a decoder in the static form, its `forward` calls made through
    the driver (pipeline/host/static_decoding.py), as an app makes them. `task`: the checks that are the
    manifest's task samples, judged by the task measure instead."""
    import torch

    from deployc.graph.metrics import text_metrics
    from deployc.graph.parity import leading_matches

    sequences, texts = sequences or [], texts or []
    generating = ({i for s in sequences for i in s} | {i for window, _ in texts for i in window}
                  | set(task.checks if task else []))
    forward = [i for i, (method, _, _) in enumerate(checks) if method == "forward" and i not in generating]
    with tempfile.TemporaryDirectory(prefix="deployc-verify-") as tmp:
        inputs_path, outputs_path = Path(tmp) / "inputs.pt", Path(tmp) / "outputs.pt"
        torch.save({"checks": [(method, inputs) for method, _, inputs in checks],
                    # A static decoder's figure is a decode call's (seq 1, the first point): its middle point
                    # is several prefill calls, each of them as slow as the emulator makes them.
                    "timed": forward[0] if static else forward[len(forward) // 2],
                    "static_decoder": static.model_dump() if static else None}, inputs_path)
        try:
            job = f"{pte} {inputs_path} {outputs_path}" + (f" {data}" if data else "")
            _, stderr = verifier.communicate(job + "\n", timeout=VERIFY_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            verifier.kill()
            verifier.wait()
            return Measurement(status="error", reason=f"the runtime did not finish within {VERIFY_TIMEOUT_S} s")
        if log is not None and stderr:
            log.write(stderr)
        if verifier.returncode != 0:
            return Measurement(status="error", reason=crash_reason(stderr, verifier.returncode))
        result = torch.load(outputs_path, weights_only=True)
    measured = []
    for i, ((method, size, _), ref, got) in enumerate(zip(checks, references, result["outputs"])):
        if i in generating:
            continue
        if len(ref) != len(got):
            return Measurement(status="error", reason=f"program returned {len(got)} outputs, eager {len(ref)}")
        try:
            metrics = [compare(r.float().numpy(), g.float().numpy()) for r, g in zip(ref, got)]
        except ValueError as exc:
            return Measurement(status="error", reason=f"at {size}: {exc}")
        measured.append(PointMetrics(method=method, dims=size, outputs=metrics))
    tokens = None
    if sequences:
        leading = [leading_matches([references[i] for i in s], [result["outputs"][i] for i in s]) for s in sequences]
        tokens = TokenParity(prompts=len(sequences), generated=max(len(s) for s in sequences), matched=min(leading),
                             identical=sum(n == len(s) for n, s in zip(leading, sequences)))
    text = shipped = None
    if texts:
        positions = []  # a call scores its last position, or (a static decoder's `score`) every one of them
        for window, targets in texts:
            refs = [row for i in window for row in references[i][0].reshape(-1, references[i][0].shape[-1])]
            gots = [row for i in window for row in result["outputs"][i][0].reshape(-1, references[i][0].shape[-1])]
            positions += list(zip(refs, gots, targets))
        try:
            text = text_metrics(text_file, positions)
            shipped = text_metrics("self-test", positions[:self_test_positions]) if self_test_positions else None
        except ValueError as exc:
            return Measurement(status="error", reason=str(exc))
    try:
        measured_task = task_measure(task, references, result["outputs"]) if task else None
    except ValueError as exc:
        return Measurement(status="error", reason=str(exc))
    return Measurement(status="measured", points=measured, summary=summarize(measured), tokens=tokens, text=text,
                       self_test_text=shipped, task=measured_task,
                       latency_ms=round(result["latency_ms"], 4), load_s=round(result["load_s"], 4))


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


def verify_reference(module: Any, checks: list[Check], references: list[list[Any]], ran_on: str,
                     task: TaskChecks | None = None) -> Measurement:
    """The lowered graph (a PyTorch module whose operators are the backend's reference kernels) run on the
    verification points in this process, compared with eager like a program's outputs. What verifies
    a backend this host's runtime cannot run (Cortex-M): honest about what ran (`ran_on`)."""
    import torch

    measured: list[PointMetrics] = []
    outputs: list[list[Any]] = []
    with torch.no_grad():
        for (method, size, inputs), ref in zip(checks, references):
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
        measured_task = task_measure(task, references, outputs) if task else None
    except ValueError as exc:
        return Measurement(status="error", ran_on=ran_on, reason=str(exc))
    return Measurement(status="measured", points=measured, summary=summarize(measured), ran_on=ran_on,
                       task=measured_task)
