"""Run a .pte through executorch.runtime (or a .tflite through LiteRT) on saved inputs, in its own process.

Isolated because a runtime fault (e.g. a program loaded without its external weights) kills the
process with SIGSEGV; the parent turns that into a failed unit. The parent starts this process early,
so that its imports overlap with lowering, and sends the job when the program exists:
    python -m deployc.graph.verify_worker      (stdin: one line, "PROGRAM INPUTS_PT OUTPUTS_PT [DATA_PTD]")
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

LATENCY_RUNS = 5


def main(argv: list[str]) -> int:
    import torch

    from deployc.graph.host_runtime import load_any

    job = argv if len(argv) >= 3 else sys.stdin.readline().split()
    if len(job) not in (3, 4):
        return 0  # the parent gave up before sending a job (the build failed first)
    program_path, inputs_path, outputs_path = job[:3]
    data_path = Path(job[3]) if len(job) == 4 else None
    runs = LATENCY_RUNS
    job_data = torch.load(inputs_path, weights_only=True)
    checks = job_data["checks"]  # [(method name, [tensors])], run in order: stateful programs see the same calls
    timed = job_data["timed"]  # the check whose call is timed
    t = time.perf_counter()
    program = load_any(Path(program_path), data_path)
    methods = {name: program.load_method(name) for name in dict.fromkeys(name for name, _ in checks)}
    load_s = time.perf_counter() - t
    outputs = [[o.clone() for o in methods[name](list(inputs))] for name, inputs in checks]
    mid = checks[timed][1]
    method = methods[checks[timed][0]]
    method(list(mid))  # warm-up
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        method(list(mid))
        times.append((time.perf_counter() - t) * 1000.0)
    torch.save({"outputs": outputs, "latency_ms": statistics.median(times), "load_s": load_s}, outputs_path)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
