"""Run a .pte through executorch.runtime on saved inputs, in its own process.

Isolated because a runtime fault (e.g. a program loaded without its external weights) kills the
process with SIGSEGV; the parent turns that into a failed unit.
Usage: python -m deployc.runtime.verify_worker PROGRAM INPUTS_PT OUTPUTS_PT [LATENCY_RUNS]
"""

from __future__ import annotations

import statistics
import sys
import time


def main(argv: list[str]) -> int:
    import torch
    from executorch.runtime import Runtime

    program_path, inputs_path, outputs_path = argv[:3]
    runs = int(argv[3]) if len(argv) > 3 else 5
    points = torch.load(inputs_path, weights_only=True)
    t = time.perf_counter()
    method = Runtime.get().load_program(program_path).load_method("forward")
    load_s = time.perf_counter() - t
    outputs = [[o.clone() for o in method.execute(list(p))] for p in points]
    mid = points[len(points) // 2]
    method.execute(list(mid))  # warm-up
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        method.execute(list(mid))
        times.append((time.perf_counter() - t) * 1000.0)
    torch.save({"outputs": outputs, "latency_ms": statistics.median(times), "load_s": load_s}, outputs_path)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
