"""Ray executor overhead: the same 4 programs built by the local pool and by Ray, in one run.

    .venv/bin/python benchmarks/ray_bench.py        # as root: Ray runs in a loopback-only netns

Each build is a fresh process with a fresh cache, on the same 2 CPUs:
  1. local pool, --jobs 2;
  2. --executor ray on a Ray cluster that deployc starts for the build (--jobs 2: 2 CPUs);
  3. --executor ray --ray-address on a running cluster of two nodes with 1 CPU each (`ray start`),
     so the cluster's start-up is not counted, only connecting, shipping the manifest folder and the tasks.
Prints wall times, the ratios to the local pool, and checks that all three bundles are byte-identical.
Timings on a shared 2-core machine are noisy: rerun.
"""

from __future__ import annotations

import filecmp
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from build_bench import MANIFEST, PARALLEL

REPO = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
NETNS = f"deployc-bench-{os.getpid()}"
PORT = 20000 + os.getpid() % 20000  # Ray refuses a port that another cluster on this machine uses
ADDRESS = f"127.0.0.1:{PORT}"


def _ns(cmd: list[str], isolated: bool) -> list[str]:
    return ["ip", "netns", "exec", NETNS, *cmd] if isolated else cmd


def _timed(cmd: list[str], cwd: Path, env: dict[str, str]) -> float:
    t = time.perf_counter()
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{proc.stderr[-2000:]}")
    return time.perf_counter() - t


def _same(a: Path, b: Path) -> bool:
    fa = sorted(p.relative_to(a) for p in a.rglob("*") if p.is_file())
    fb = sorted(p.relative_to(b) for p in b.rglob("*") if p.is_file())
    return fa == fb and all(filecmp.cmp(a / f, b / f, shallow=False) for f in fa)


def main() -> None:
    isolated = os.geteuid() == 0 and shutil.which("ip") is not None
    if not isolated:
        print("note: not root, so Ray runs without a network namespace and binds to this host's addresses")
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "token",
           "RAY_AUTH_TOKEN": secrets.token_hex(32)}
    env.pop("RAY_ADDRESS", None)
    work = Path(tempfile.mkdtemp(prefix="deployc-ray-bench-"))
    ray = str(BIN / "ray")
    try:
        shutil.copytree(REPO / "targets", work / "targets")
        shutil.copytree(REPO / "manifests" / "models", work / "models",
                        ignore=shutil.ignore_patterns("__pycache__"))
        (work / "parallel.yaml").write_text(MANIFEST.split("models:")[0].replace("bench", "parallel") + "models:" +
                                            PARALLEL + "\n")
        if isolated:
            subprocess.run(["ip", "netns", "add", NETNS], check=True)
            subprocess.run(_ns(["ip", "link", "set", "lo", "up"], True), check=True)
        build = [str(BIN / "deployc"), "build", "parallel.yaml", "--jobs", "2"]
        local_s = _timed([*build, "--cache-dir", "c1", "--out", "o1"], work, env)
        started_s = _timed(_ns([*build, "--cache-dir", "c2", "--out", "o2", "--executor", "ray"], isolated), work, env)
        common = ["--node-ip-address=127.0.0.1", "--num-cpus=1", "--disable-usage-stats"]
        subprocess.run(_ns([ray, "start", "--head", f"--port={PORT}", "--include-dashboard=false", *common], isolated),
                       env=env, check=True, capture_output=True)
        subprocess.run(_ns([ray, "start", f"--address={ADDRESS}", *common], isolated), env=env, check=True,
                       capture_output=True)
        cluster_s = _timed(_ns([*build, "--cache-dir", "c3", "--out", "o3", "--executor", "ray", "--ray-address",
                                ADDRESS], isolated), work, env)
        identical = _same(work / "o1", work / "o2") and _same(work / "o1", work / "o3")
    finally:
        if isolated:  # only this namespace's processes: `ray stop` would stop every Ray cluster here
            for signal_name in ("-TERM", "-KILL"):
                pids = subprocess.run(["ip", "netns", "pids", NETNS], capture_output=True, text=True).stdout.split()
                subprocess.run(["kill", signal_name, *pids], capture_output=True)
                time.sleep(5)
            subprocess.run(["ip", "netns", "delete", NETNS], capture_output=True)
        else:
            subprocess.run([ray, "stop", "--force"], env=env, capture_output=True)
        shutil.rmtree(work, ignore_errors=True)

    rows = [
        ("local pool, --jobs 2", local_s),
        ("ray, cluster started by the build (2 CPUs)", started_s),
        ("ray, running 2-node cluster (1 CPU each)", cluster_s),
    ]
    print(f"{'4 programs, cold cache':<46} {'wall':>8} {'vs local':>9}")
    for name, seconds in rows:
        print(f"{name:<46} {seconds:>7.1f}s {seconds / local_s:>8.2f}x")
    print(f"bundles byte-identical across the three: {identical}")


if __name__ == "__main__":
    main()
