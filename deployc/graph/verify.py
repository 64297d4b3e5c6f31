"""Run a built program through the ExecuTorch runtime, in a child process, on the same inputs the
eager model saw, and measure how far its outputs are from eager's.

The child starts before lowering (its imports then overlap with it) and waits for its job on stdin.
A runtime crash kills only the child; the unit reports it."""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from deployc.build.facts import (
    Measurement,
    PointMetrics,
    SizeRange,
    TensorFacts,
    TokenParity,
)
from deployc.graph import verify_worker
from deployc.graph.metrics import compare, summarize

VERIFY_TIMEOUT_S = 900

Check = tuple[str, dict[str, int], list[Any]]  # (method, dims, inputs): one call at one verification point


def start_verifier() -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", verify_worker.__name__], stdin=subprocess.PIPE,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


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
           self_test_positions: int = 0) -> Measurement:
    """`sequences`: per prompt, the indexes of the checks that generate from it (text-generation
    programs); they are compared by the tokens they choose. `texts`: per held-out window, the indexes of
    its checks and the token each should predict; compared as next-token distributions, over all of them
    and over the first `self_test_positions` (those the self-test vectors carry). The other checks by
    the metrics."""
    import torch

    from deployc.graph.metrics import text_metrics
    from deployc.graph.parity import leading_matches

    sequences, texts = sequences or [], texts or []
    generating = {i for s in sequences for i in s} | {i for window, _ in texts for i in window}
    forward = [i for i, (method, _, _) in enumerate(checks) if method == "forward" and i not in generating]
    with tempfile.TemporaryDirectory(prefix="deployc-verify-") as tmp:
        inputs_path, outputs_path = Path(tmp) / "inputs.pt", Path(tmp) / "outputs.pt"
        torch.save({"checks": [(method, inputs) for method, _, inputs in checks],
                    "timed": forward[len(forward) // 2]}, inputs_path)
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
            code = verifier.returncode
            # The runtime's own complaint, not the delegate's shutdown chatter that follows it.
            said = [line for line in stderr.strip().splitlines() if not line.startswith(("[INFO]", "[WARNING]"))]
            tail = " | ".join(said[-3:])
            how = f"killed by signal {-code}" if code < 0 else f"exit code {code}"
            return Measurement(status="error", reason=f"executorch.runtime crashed ({how}): {tail[:400]}")
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
        positions = [(references[i][0], result["outputs"][i][0], target)
                     for window, targets in texts for i, target in zip(window, targets)]
        try:
            text = text_metrics(text_file, positions)
            shipped = text_metrics("self-test", positions[:self_test_positions]) if self_test_positions else None
        except ValueError as exc:
            return Measurement(status="error", reason=str(exc))
    return Measurement(status="measured", points=measured, summary=summarize(measured), tokens=tokens, text=text,
                       self_test_text=shipped,
                       latency_ms=round(result["latency_ms"], 4), load_s=round(result["load_s"], 4))
