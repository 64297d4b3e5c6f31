"""What the HTP emulator takes from a job beside it, and what a niceness of 10 gives back, in one run.

    .venv/bin/python benchmarks/emulator_niceness.py [--bundle dist/rag-offline/1.0.0/snapdragon]
                                                      [--program embedder] [--calls 12] [--rounds 2]

The QNN backend's programs run on this host in the x86 HTP emulator, which spreads each call over 8 threads.
In a build the job beside it is a lowering (one thread, the critical path of rag_offline). This times a
one-thread Python loop (the lowering's stand-in) alone, beside the emulator running `--calls` calls of an NPU
program, and beside the same emulator at niceness 10 (the QNN backend's `host_niceness`: what the build's
verifier and embed worker take), taking turns round by round; and the emulator's own seconds and CPU-seconds
each way. The bundle is any built bundle with an NPU program (`make demo` builds the default one).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
LOOP = """
import time
t = time.perf_counter()
x = 0
for i in range(60_000_000):
    x += i
print(time.perf_counter() - t)
"""
EMULATE = """
import os, sys, time, json
from pathlib import Path
import numpy as np
import torch
from deployc.runtime.pipeline_runner import Bundle
bundle = Bundle(Path(sys.argv[1]))
method = bundle.method(sys.argv[2])
entry = bundle.programs[sys.argv[2]]
forward = next(m for m in entry["methods"] if m["name"] == "forward")
inputs = [torch.ones([d["value"] if "value" in d else d["max"] for d in i["shape"]], dtype=getattr(torch, i["dtype"]))
          for i in forward["inputs"]]
method(inputs)  # loaded and warm
print("ready", flush=True)
t, c = time.perf_counter(), os.times()
for _ in range(int(sys.argv[3])):
    method(inputs)
d = os.times()
print(json.dumps({"s": time.perf_counter() - t, "cpu_s": d.user - c.user + d.system - c.system}), flush=True)
"""


def loop_alone() -> float:
    return float(subprocess.run([sys.executable, "-c", LOOP], capture_output=True, text=True, check=True).stdout)


def beside_emulator(bundle: Path, program: str, calls: int, niceness: int) -> tuple[float, dict[str, float]]:
    """The loop's seconds while the emulator runs `calls` calls (started once it is loaded), and the emulator's."""
    cmd = [sys.executable, "-c", EMULATE, str(bundle), program, str(calls)]
    if niceness:
        cmd = ["nice", "-n", str(niceness), *cmd]
    emulator = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=REPO)
    assert emulator.stdout is not None
    lines = iter(emulator.stdout)  # the QNN libraries print lines of their own
    if not any(line.strip() == "ready" for line in lines):
        raise SystemExit(f"the emulator did not load {program} from {bundle}")
    time.sleep(1.0)
    loop = loop_alone()
    figures = json.loads(next(line for line in lines if line.startswith("{")))
    emulator.wait()
    return loop, figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bundle", type=Path, default=REPO / "dist/rag-offline/1.0.0/snapdragon")
    parser.add_argument("--program", default="embedder")
    parser.add_argument("--calls", type=int, default=12)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    alone, plain, niced = [], [], []
    for _ in range(args.rounds):
        alone.append(loop_alone())
        plain.append(beside_emulator(args.bundle, args.program, args.calls, 0))
        niced.append(beside_emulator(args.bundle, args.program, args.calls, 10))
    base = statistics.median(alone)
    print(f"{'one-thread loop':<34}{'loop s':>8}{'vs alone':>10}{'emulator s':>12}{'emulator CPU-s':>16}")
    print(f"{'alone':<34}{base:>8.2f}{1.0:>9.2f}x{'-':>12}{'-':>16}")
    for name, runs in (("beside the emulator", plain), ("beside the emulator, niceness 10", niced)):
        loop = statistics.median(r[0] for r in runs)
        s = statistics.median(r[1]["s"] for r in runs)
        cpu = statistics.median(r[1]["cpu_s"] for r in runs)
        print(f"{name:<34}{loop:>8.2f}{loop / base:>9.2f}x{s:>12.1f}{cpu:>16.1f}")


if __name__ == "__main__":
    main()
