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
from collections.abc import Callable
from pathlib import Path
from typing import Any

from deployc.core.static_decoder import PREFIX_METHODS, SCORE, StaticDecoderLayout

LATENCY_RUNS = 5


def main(argv: list[str]) -> int:
    import torch

    from deployc.graph.host_runtime import load_any

    job = argv if len(argv) >= 3 else sys.stdin.readline().split()
    if len(job) not in (3, 4):
        return 0  # the parent gave up before sending a job (the build failed first)
    program_path, inputs_path, outputs_path = job[:3]
    data_path = Path(job[3]) if len(job) == 4 else None
    job_data = torch.load(inputs_path, weights_only=True)
    checks = job_data["checks"]  # [(method name, [tensors])], run in order: stateful programs see the same calls
    timed = job_data["timed"]  # the check whose call is timed
    t = time.perf_counter()
    program = load_any(Path(program_path), data_path)
    static = job_data.get("static_decoder")
    costs: dict[str, list[float]] = {}  # a static decoder's methods: each call's seconds
    if static is not None:
        methods = static_forward(program, StaticDecoderLayout.model_validate(static), costs)
    else:
        methods = {name: program.load_method(name) for name in dict.fromkeys(name for name, _ in checks)}
    load_s = time.perf_counter() - t
    outputs = []
    timed_method = ""
    for i, (name, inputs) in enumerate(checks):
        before = {m: len(c) for m, c in costs.items()} if i == timed else {}
        outputs.append([o.clone() for o in methods[name](list(inputs))])
        if i == timed:  # the method the timed check's first call went to
            timed_method = next((m for m, c in costs.items() if len(c) > before.get(m, 0)), "")
    if static is not None:
        # Each call costs seconds on the HTP emulator: the latency is the median of the calls the checks made to
        # the timed check's method (the first, cold call among them), not calls made again for the timing.
        times = [seconds * 1000.0 for seconds in costs[timed_method]]
    else:
        mid = checks[timed][1]
        method = methods[checks[timed][0]]
        method(list(mid))  # warm-up
        times = []
        for _ in range(LATENCY_RUNS):
            t = time.perf_counter()
            method(list(mid))
            times.append((time.perf_counter() - t) * 1000.0)
    torch.save({"outputs": outputs, "latency_ms": statistics.median(times), "load_s": load_s,
                "method_calls": {name: (len(calls), sum(calls)) for name, calls in costs.items()}}, outputs_path)
    return 0


def static_forward(program: Any, layout: StaticDecoderLayout, costs: dict[str, list[float]] | None = None
                   ) -> dict[str, Callable[[list[Any]], list[Any]]]:
    """`forward(tokens, input_pos)` of a decoder in the static form, and `score` (the logits at every
    position): the driver over its methods. `costs` gathers each method's calls' seconds."""
    import numpy as np
    import torch

    from deployc.pipeline.host.static_decoding import StaticDecoding

    prefix = PREFIX_METHODS if layout.prefix_token >= 0 else ()
    loaded = {m: program.load_method(m) for m in [*(m for m, _ in layout.methods()), *prefix]}

    def call(method: str, inputs: list[np.ndarray]) -> list[np.ndarray]:
        start = time.perf_counter()
        out = [o.numpy() for o in loaded[method]([torch.from_numpy(np.ascontiguousarray(x)) for x in inputs])]
        if costs is not None and method not in PREFIX_METHODS:  # the build's rows, read back: not a program call
            costs.setdefault(method, []).append(time.perf_counter() - start)
        return out

    session = StaticDecoding(layout, call)
    return {"forward": lambda inputs: [torch.from_numpy(session.forward(inputs[0].numpy(), inputs[1].numpy()))],
            SCORE: lambda inputs: [torch.from_numpy(session.score(inputs[0].numpy(), inputs[1].numpy()))]}


if __name__ == "__main__":
    from deployc.graph.host_runtime import take_niceness

    take_niceness()  # before torch starts any thread
    sys.exit(main(sys.argv[1:]))
