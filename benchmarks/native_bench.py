"""Native runner vs the Python runtime on the same programs, in one run, side by side.

    .venv/bin/python benchmarks/native_bench.py BUNDLE_DIR [PROGRAM ...]

For each program's forward at its largest declared input shapes: cold start (wall time of a whole
process that opens the bundle, checks it, loads the method and makes one call) and the median
per-call latency over 20 calls, for
`deployc-runner` (built by `deployc native build`) and for the Python runtime (`deployc.runtime`).
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
RUNNER = REPO / "native" / "build" / "deployc-runner"
CALLS = 20

PYTHON = r"""
import json, sys, time
t0 = time.perf_counter()
import numpy as np
from pathlib import Path
from deployc.runtime.pipeline_runner import Bundle
bundle = Bundle(Path(sys.argv[1]))
program = sys.argv[2]
inputs = [np.load(f) for f in sys.argv[3:]]
bundle.method(program)
cold = (time.perf_counter() - t0) * 1000
times = []
for _ in range(int(%d)):
    t = time.perf_counter(); bundle.call(program, inputs); times.append((time.perf_counter() - t) * 1000)
times.sort()
print(json.dumps({"cold_ms": cold, "median_ms": times[len(times) // 2]}))
""" % CALLS


def _inputs(config: dict, program: str, folder: Path) -> list[str]:
    forward = next(m for m in next(p for p in config["programs"] if p["name"] == program)["methods"]
                   if m["name"] == "forward")
    files = []
    rng = np.random.default_rng(0)
    for i, t in enumerate(forward["inputs"]):
        shape = [d["value"] if d["value"] >= 0 else d["max"] for d in t["shape"]]
        if t["dtype"] == "int64":
            a = np.arange(int(np.prod(shape)), dtype=np.int64).reshape(shape) % 100
        else:
            a = rng.uniform(-1, 1, shape).astype(np.float32)
        np.save(folder / f"{program}_{i}.npy", a)
        files.append(str(folder / f"{program}_{i}.npy"))
    return files


def main() -> None:
    bundle = Path(sys.argv[1])
    config = json.loads((bundle / "runtime.json").read_text())
    programs = sys.argv[2:] or [p["name"] for p in config["programs"]]
    if not RUNNER.is_file():
        raise SystemExit(f"{RUNNER} is missing: run `deployc native build` first")
    print(f"{'program':<16} {'cold native':>12} {'cold python':>12} {'ratio':>7}  {'call native':>12} "
          f"{'call python':>12} {'ratio':>7}")
    with tempfile.TemporaryDirectory() as tmp:
        for program in programs:
            files = _inputs(config, program, Path(tmp))
            args = [a for f in files for a in ("--input", f)]
            t = time.perf_counter()
            subprocess.run([str(RUNNER), str(bundle), "--program", program, *args], check=True, capture_output=True)
            native_cold_total = (time.perf_counter() - t) * 1000
            out = subprocess.run([str(RUNNER), str(bundle), "--program", program, *args, "--repeat", str(CALLS)],
                                 check=True, capture_output=True, text=True).stdout
            native = json.loads(out)
            t = time.perf_counter()
            py = json.loads(subprocess.run([sys.executable, "-c", PYTHON, str(bundle), program, *files], check=True,
                                           capture_output=True, text=True).stdout)
            python_cold_total = (time.perf_counter() - t) * 1000  # includes its CALLS calls: an upper bound
            print(f"{program:<16} {native_cold_total:>10.1f}ms {python_cold_total:>10.1f}ms "
                  f"{python_cold_total / native_cold_total:>6.1f}x  {native['median_ms']:>10.3f}ms "
                  f"{py['median_ms']:>10.3f}ms {py['median_ms'] / max(native['median_ms'], 1e-9):>6.1f}x")


if __name__ == "__main__":
    main()
