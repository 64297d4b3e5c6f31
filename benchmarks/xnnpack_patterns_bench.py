"""What XNNPACK's pattern passes cost a build worker, and what skipping them where they cannot match saves
(deployc/targets/backends/xnnpack_patterns.py). Each run is a fresh process, as every build worker is:
it lowers one model to XNNPACK (torch.export, to_edge_transform_and_lower, to_executorch) and times the
lowering alone, with ExecuTorch's passes as they come and with deployc's skip installed, alternating.

    .venv/bin/python benchmarks/xnnpack_patterns_bench.py [RUNS]     (default 3 runs each way, ~1 minute)
"""

from __future__ import annotations

import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

ONE_RUN = """
import hashlib, sys, time, torch
from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
from executorch.exir import to_edge_transform_and_lower
from deployc.targets.backends import xnnpack_patterns

if sys.argv[1] == "skip":
    xnnpack_patterns.install()
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Conv2d(3, 16, 3, padding=1), torch.nn.ReLU(), torch.nn.Flatten(),
                            torch.nn.Linear(16 * 32 * 32, 10)).eval()
exported = torch.export.export(model, (torch.randn(1, 3, 32, 32),))
start = time.perf_counter()
program = to_edge_transform_and_lower(exported, partitioner=[XnnpackPartitioner()]).to_executorch()
print(time.perf_counter() - start, hashlib.sha256(program.buffer).hexdigest())
"""


def run(way: str) -> tuple[float, str]:
    out = subprocess.run([sys.executable, "-c", ONE_RUN, way], capture_output=True, text=True, cwd=ROOT, check=True)
    seconds, digest = out.stdout.split()[-2:]
    return float(seconds), digest


def main() -> None:
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    times: dict[str, list[float]] = {"as shipped": [], "skip": []}
    digests = set()
    for _ in range(runs):
        for way in times:
            seconds, digest = run(way.split()[0])
            times[way].append(seconds)
            digests.add(digest)
    plain = statistics.median(times["as shipped"])
    print(f"{'passes':<12} {'lowering s (median of ' + str(runs) + ')':>28} {'ratio':>7}")
    for way, values in times.items():
        median = statistics.median(values)
        print(f"{way:<12} {median:>28.2f} {plain / median:>6.2f}x  ({', '.join(f'{v:.2f}' for v in values)})")
    print(f"same program bytes every run: {len(digests) == 1}")


if __name__ == "__main__":
    main()
