"""Program load and first output: `deployc run`'s path against a minimal raw ExecuTorch load of the same
.pte (the anchor), per program of a bundle, side by side.

    .venv/bin/python benchmarks/load_bench.py BUNDLE_DIR      (e.g. dist/rag-offline/1.0.0/arduino_q)

Each measurement is a fresh process (median of 5), timed inside it after the imports: load = program +
forward method loaded (XNNPACK packs its weights here), first = the first call on one token (the
smallest declared input). raw: `executorch.runtime.Runtime.get().load_program(path)` (with
`executorch.kernels.quantized` imported: without it a program with quantized embedding tables does not
load). deployc:
`deployc.graph.host_runtime.load_program`, what `deployc run` and the build's verifier use.

Then the same for the native runner (built by `deployc native build`), as whole processes: the anchor is
`deployc-runner --raw PROGRAM.pte` (a bare ExecuTorch Module: mmap, load, one call), against
`deployc-runner BUNDLE --program NAME` (runtime.bin read and verified, every file's sha256 checked,
planned-memory arenas from the config, the declared warm-up, input checks, one call), and the same
with --quick-check (files checked by size, not sha256: an app's later starts): time from process start
to the first output, measured inside the process.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

RUNNER = Path(__file__).resolve().parent.parent / "native" / "build" / "deployc-runner"

CHILD = r"""
import json, sys, time
import torch
path, kind, shapes = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
if kind == "raw":
    from executorch.runtime import Runtime
    import executorch.kernels.quantized  # quantized embedding tables need ExecuTorch's quantized kernels
    runtime = Runtime.get()
    t = time.perf_counter()
    method = runtime.load_program(path).load_method("forward")
    call = lambda xs: method.execute(xs)
else:
    from deployc.graph import host_runtime as host
    from deployc.targets.backends.qnn import host as qnn_host  # noqa: F401
    host._c()  # the extension and the quantized kernels: imports, not loading
    load_program = host.load_program
    t = time.perf_counter()
    method = load_program(path).load_method("forward")
    call = lambda xs: method(xs)
load = time.perf_counter() - t
inputs = [torch.zeros(shape, dtype=torch.int64) if dtype == "int64" else torch.zeros(shape) for shape, dtype in shapes]
t = time.perf_counter()
call(inputs)
print(json.dumps({"load_ms": load * 1000, "first_ms": (time.perf_counter() - t) * 1000}))
"""
RUNS = 5


def _smallest(program: dict) -> list[tuple[list[int], str]]:
    forward = next(m for m in program["methods"] if m["name"] == "forward")
    return [([d["min"] for d in t["shape"]], t["dtype"]) for t in forward["inputs"]]


def _measure(path: Path, kind: str, shapes: list) -> dict[str, float]:
    runs = []
    for _ in range(RUNS):
        out = subprocess.run([sys.executable, "-c", CHILD, str(path), kind, json.dumps(shapes)], check=True,
                             capture_output=True, text=True).stdout
        runs.append(json.loads(out.strip().splitlines()[-1]))
    return {k: statistics.median(r[k] for r in runs) for k in ("load_ms", "first_ms")}


def main() -> None:
    bundle = Path(sys.argv[1])
    config = json.loads((bundle / "runtime.json").read_text())
    print(f"{'program':<10} {'size':>10} {'raw load':>10} {'deployc load':>13} {'ratio':>6} {'raw first':>10} "
          f"{'deployc first':>14}")
    total_raw = total_ours = 0.0
    for p in config["programs"]:
        if p["backend"] != "xnnpack":
            print(f"{p['name']:<10} not measured: {p['backend']} programs need their device or emulator")
            continue
        shapes = _smallest(p)
        raw = _measure(bundle / p["file"], "raw", shapes)
        ours = _measure(bundle / p["file"], "deployc", shapes)
        total_raw += raw["load_ms"] + raw["first_ms"]
        total_ours += ours["load_ms"] + ours["first_ms"]
        print(f"{p['name']:<10} {p['size_bytes']:>10,} {raw['load_ms']:>8.1f}ms {ours['load_ms']:>11.1f}ms "
              f"{ours['load_ms'] / raw['load_ms']:>5.2f}x {raw['first_ms']:>8.1f}ms {ours['first_ms']:>12.1f}ms")
    print(f"\nwhole bundle, load + first output: raw {total_raw:.0f} ms, deployc {total_ours:.0f} ms "
          f"({total_ours / total_raw:.2f}x; goal <= 1.2x)")
    if RUNNER.is_file():
        native(bundle, config)
    else:
        print(f"\nnative rows skipped: {RUNNER} is missing (deployc native build)")


def _median_ready(cmd: list[str]) -> float:
    runs = [json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.strip().splitlines()[-1])
            for _ in range(RUNS)]
    return statistics.median(r["ready_ms"] for r in runs)


def native(bundle: Path, config: dict) -> None:
    print(f"\nnative runner, process start to first output (median of {RUNS}):")
    print(f"{'program':<10} {'raw Module':>11} {'deployc-runner':>15} {'ratio':>6} {'--quick-check':>14} {'ratio':>6}")
    total_raw = total_ours = total_quick = 0.0
    with tempfile.TemporaryDirectory() as tmp:
        for p in config["programs"]:
            if p["backend"] != "xnnpack":
                continue
            files = []
            for i, (shape, dtype) in enumerate(_smallest(p)):
                np.save(Path(tmp) / f"{p['name']}{i}.npy", np.zeros(shape, dtype=np.int64 if dtype == "int64"
                                                                       else np.float32))
                files += ["--input", str(Path(tmp) / f"{p['name']}{i}.npy")]
            raw = _median_ready([str(RUNNER), "--raw", str(bundle / p["file"]), *files])
            ours = _median_ready([str(RUNNER), str(bundle), "--program", p["name"], *files])
            quick = _median_ready([str(RUNNER), str(bundle), "--program", p["name"], "--quick-check", *files])
            total_raw += raw
            total_ours += ours
            total_quick += quick
            print(f"{p['name']:<10} {raw:>9.1f}ms {ours:>13.1f}ms {ours / raw:>5.2f}x {quick:>12.1f}ms "
                  f"{quick / raw:>5.2f}x")
    print(f"whole bundle: raw {total_raw:.0f} ms, deployc-runner {total_ours:.0f} ms ({total_ours / total_raw:.2f}x), "
          f"--quick-check {total_quick:.0f} ms ({total_quick / total_raw:.2f}x); goals <= 1.2x and < 300 ms")


if __name__ == "__main__":
    main()
