"""Build benchmark: deployc against a hand-written ExecuTorch script, in one run, side by side.

    .venv/bin/python benchmarks/build_bench.py

Measures (each a fresh process, fresh cache unless stated):
  1. hand-written script vs `deployc build` on the same model and steps (load, 8da8w, export, lower,
     serialize, verify at 3 points through executorch.runtime): wall time and peak RSS of the process tree;
  2. cold build vs no-op rebuild (same cache);
  3. `--jobs 2` vs `--jobs 1` on 4 independent programs.
Prints a table of ratios with their targets. Timings on a shared 2-core machine are noisy: rerun.
"""

from __future__ import annotations

import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent

HAND_WRITTEN = r'''
import sys, torch
sys.path.insert(0, sys.argv[1])
from models.small import mlp
from torchao.quantization import quantize_, Int8DynamicActivationIntxWeightConfig
from torchao.quantization.granularity import PerAxis
from executorch.exir import to_edge_transform_and_lower
from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
from executorch.runtime import Runtime
torch.manual_seed(0)
m = mlp().eval()
pts = [torch.rand(b, 64) * 4 - 2 for b in (1, 4, 8)]
with torch.no_grad():
    refs = [m(p) for p in pts]
quantize_(m, Int8DynamicActivationIntxWeightConfig(weight_dtype=torch.int8, weight_granularity=PerAxis(0)))
batch = torch.export.Dim("batch", min=1, max=8)
ep = torch.export.export(m, (torch.rand(4, 64),), dynamic_shapes={"x": {0: batch}})
prog = to_edge_transform_and_lower(ep, partitioner=[XnnpackPartitioner()]).to_executorch()
open(sys.argv[2], "wb").write(prog.buffer)
meth = Runtime.get().load_program(sys.argv[2]).load_method("forward")
for p, r in zip(pts, refs):
    out = meth.execute([p])[0]
    cos = torch.nn.functional.cosine_similarity(out.flatten(), r.flatten(), dim=0)
    assert cos > 0.99, cos
'''

MANIFEST = """\
apiVersion: deployc/v1
name: bench
version: 0.1.0
targets: [arduino_q]
models:
  classifier:
    source: {factory: "models.small:mlp"}
    inputs:
      x: {shape: [batch, 64], range: [-2.0, 2.0]}
    dims:
      batch: {min: 1, max: 8}
    quantization: 8da8w
"""

# Four independent programs of similar cost, for the --jobs comparison.
PARALLEL = "".join(f"""
  mlp{i}:
    source: {{factory: "models.small:mlp", kwargs: {{hidden: {192 + 32 * i}}}}}
    inputs:
      x: {{shape: [batch, 64]}}
    dims:
      batch: {{min: 1, max: 8}}
    quantization: 8da8w""" for i in range(4))


def _tree_rss_kib(root: int) -> tuple[int, int]:
    """(sum, largest) of the current RSS of `root` and its descendants, from /proc. The sum counts
    pages shared between processes (torch's libraries) once per process."""
    parents: dict[int, int] = {}
    rss: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            status = Path(f"/proc/{entry}/status").read_text()
        except OSError:
            continue
        parents[int(entry)] = int(stat.rsplit(")", 1)[1].split()[1])
        for line in status.splitlines():
            if line.startswith("VmRSS:"):
                rss[int(entry)] = int(line.split()[1])
    total, largest, todo = 0, 0, [root]
    while todo:
        pid = todo.pop()
        total += rss.get(pid, 0)
        largest = max(largest, rss.get(pid, 0))
        todo.extend(c for c, p in parents.items() if p == pid)
    return total, largest


def cpu_seconds() -> float:
    """CPU time of every waited-for child process and its descendants so far."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def run(cmd: list[str], cwd: Path) -> tuple[float, float, float]:
    """(wall seconds, peak RSS of the process tree in MiB, peak RSS of its largest process in MiB)."""
    t = time.perf_counter()
    # Byte-compiled modules, as an installed deployc has them (some CI images set PYTHONDONTWRITEBYTECODE,
    # which recompiles deployc's ~100 modules on every start: 40 ms of a no-op rebuild).
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    proc = subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
    peak = largest = 0
    done = threading.Event()

    def sample() -> None:
        nonlocal peak, largest
        while not done.is_set():
            tree, one = _tree_rss_kib(proc.pid)
            peak, largest = max(peak, tree), max(largest, one)
            time.sleep(0.1)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    _, err = proc.communicate()
    wall = time.perf_counter() - t  # before joining the sampler, whose 0.1 s naps are not the command's
    done.set()
    sampler.join()
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{err[-2000:]}")
    return wall, peak / 1024, largest / 1024


def main() -> None:
    work = Path(tempfile.mkdtemp(prefix="deployc-bench-"))
    try:
        shutil.copytree(REPO / "targets", work / "targets")
        shutil.copytree(REPO / "manifests" / "models", work / "models")
        (work / "bench.yaml").write_text(MANIFEST)
        (work / "hand.py").write_text(HAND_WRITTEN)
        (work / "parallel.yaml").write_text(MANIFEST.split("models:")[0].replace("bench", "parallel") + "models:" +
                                            PARALLEL + "\n")
        deployc = [str(BIN / "deployc"), "build"]

        hand_s, hand_rss, _ = run([sys.executable, "hand.py", str(work), str(work / "hand.pte")], work)
        cold_s, cold_rss, cold_one = run([*deployc, "bench.yaml", "--cache-dir", "c1", "--out", "o1", "--jobs", "1"],
                                         work)
        noop = [*deployc, "bench.yaml", "--cache-dir", "c1", "--out", "o1", "--jobs", "1"]
        noop_s = statistics.median(run(noop, work)[0] for _ in range(5))
        cpu_before_j1 = cpu_seconds()
        j1_s, _, _ = run([*deployc, "parallel.yaml", "--cache-dir", "c2", "--out", "o2", "--jobs", "1"], work)
        busy = (cpu_seconds() - cpu_before_j1) / j1_s  # cores kept busy by one job: XNNPACK and the verifier
        cpu = cpu_seconds()
        j1_cpu = cpu - cpu_before_j1
        j2_s, _, _ = run([*deployc, "parallel.yaml", "--cache-dir", "c3", "--out", "o3", "--jobs", "2"], work)
        j2_cpu = cpu_seconds() - cpu
    finally:
        shutil.rmtree(work, ignore_errors=True)

    rows = [
        ("deployc build / hand-written script (wall)", f"{cold_s:.1f} s / {hand_s:.1f} s", cold_s / hand_s, "<= 1.05x"),
        ("cold build / no-op rebuild (wall)", f"{cold_s:.1f} s / {noop_s:.2f} s", cold_s / noop_s, ">= 50x"),
        ("--jobs 1 / --jobs 2, 4 programs (wall)", f"{j1_s:.1f} s / {j2_s:.1f} s", j1_s / j2_s, ">= 1.7x"),
        ("  ceiling: cores / cores busy with --jobs 1", f"{os.cpu_count()} / {busy:.2f}", (os.cpu_count() or 1) / busy,
         "(no schedule beats it)"),
        ("  CPU time of the same work, --jobs 2 / --jobs 1", f"{j2_cpu:.1f} s / {j1_cpu:.1f} s", j2_cpu / j1_cpu,
         "(> 1: running two at once makes the work itself slower)"),
        ("  ceiling at --jobs 2's CPU cost: --jobs 1 / (CPU / cores)",
         f"{j1_s:.1f} s / {j2_cpu / (os.cpu_count() or 1):.1f} s", j1_s / (j2_cpu / (os.cpu_count() or 1)),
         "(what a perfect schedule of that work gives)"),
        ("peak RSS, whole process tree / hand-written", f"{cold_rss:.0f} MiB / {hand_rss:.0f} MiB",
         cold_rss / hand_rss, "<= 1.2x"),
        ("peak RSS, largest process / hand-written", f"{cold_one:.0f} MiB / {hand_rss:.0f} MiB",
         cold_one / hand_rss, "<= 1.2x"),
    ]
    print(f"{'measure':<44} {'values':<24} {'ratio':>7}  target")
    for name, values, ratio, target in rows:
        print(f"{name:<44} {values:<24} {ratio:>6.2f}x  {target}")


if __name__ == "__main__":
    main()
