"""How fast the commands that must feel instant are, against a bare interpreter start, in one run.

    .venv/bin/python benchmarks/cli_bench.py [--runs N]

Each command runs N times (default 7) in a fresh process, the commands taking turns round by round (the
machine's noise then falls on all of them alike); the median wall times are compared with
`python -c pass` (the floor any command pays) and with `python -c "import torch"` (what validate, plan and
a no-op build must never pay). Goals: `plan` <= 10x a bare interpreter, and a no-op `build` of a manifest
<= 1.3x the `plan` of the same manifest (it plans, then finds every program cached and every release
unchanged). Timings on a shared 2-core machine are noisy: rerun before trusting one figure.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))
from helpers.suites import TINY  # noqa: E402  - the one-model manifest the tests build many times


def _bomb(levels: int) -> str:
    lines = ['a0: &a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    lines += [f"a{i}: &a{i} [{','.join([f'*a{i - 1}'] * 9)}]" for i in range(1, levels)]
    return "\n".join(lines) + "\n"


def medians(commands: dict[str, tuple[list[str], int]], cwd: Path, runs: int) -> dict[str, float]:
    """Median wall time of each command over `runs` rounds; each round runs every command once, in turn, so
    that the machine's slow and fast moments fall on all of them alike."""
    # Byte-compiled modules, as an installed deployc has them (this machine sets PYTHONDONTWRITEBYTECODE).
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    times: dict[str, list[float]] = {name: [] for name in commands}
    for round_ in range(runs + 1):  # the first round compiles what each command imports: not counted
        for name, (cmd, expect) in commands.items():
            t = time.perf_counter()
            proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, env=env)
            if round_:
                times[name].append(time.perf_counter() - t)
            if proc.returncode != expect:
                raise SystemExit(f"{' '.join(cmd)} failed:\n{proc.stderr[-2000:]}")
    return {name: statistics.median(t) for name, t in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=7)
    runs = parser.parse_args().runs
    work = Path(tempfile.mkdtemp(prefix="deployc-cli-bench-"))
    try:
        shutil.copytree(REPO / "manifests" / "models", work / "models")
        (work / "tiny.yaml").write_text(TINY)
        (work / "bomb.yaml").write_text(_bomb(9))
        deployc = [sys.executable, "-m", "deployc"]
        rag = str(REPO / "manifests" / "rag_offline.yaml")
        subprocess.run([*deployc, "build", "tiny.yaml", "--cache-dir", "c", "--out", "o"], cwd=work, check=True,
                       capture_output=True)
        subprocess.run([*deployc, "plan", "tiny.yaml", "--cache-dir", "c", "--out", "tiny.plan.json"], cwd=work,
                       check=True, capture_output=True)
        commands = {
            "python -c pass": ([sys.executable, "-c", "pass"], 0),
            "validate bomb.yaml (an alias bomb: refused)": ([*deployc, "validate", "bomb.yaml"], 2),
            "validate rag_offline.yaml": ([*deployc, "validate", rag], 0),
            "plan rag_offline.yaml --json": ([*deployc, "plan", rag, "--json"], 0),
            "plan tiny.yaml": ([*deployc, "plan", "tiny.yaml", "--cache-dir", "c", "--dist", "o"], 0),
            "plan tiny.yaml --out plan.json": ([*deployc, "plan", "tiny.yaml", "--cache-dir", "c", "--out", "p.json"],
                                               0),
            "build tiny.yaml (no-op: all cached, release unchanged)":
                ([*deployc, "build", "tiny.yaml", "--cache-dir", "c", "--out", "o"], 0),
            "build --plan (no-op)": ([*deployc, "build", "--plan", "tiny.plan.json", "--cache-dir", "c", "--out", "o"],
                                     0),
        }
        times = medians(commands, work, runs)
        bare = times.pop("python -c pass")
        torch = medians({"torch": ([sys.executable, "-c", "import torch"], 0)}, work, max(3, runs // 2))["torch"]
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"python -c pass: {bare * 1000:.0f} ms; python -c 'import torch': {torch * 1000:.0f} ms "
          f"({runs} runs each, median)")
    print(f"{'command':<56} {'wall':>7} {'/ bare':>7} {'/ torch':>8}")
    for name, t in times.items():
        print(f"{name:<56} {t * 1000:>4.0f} ms {t / bare:>6.1f}x {t / torch:>7.2f}x")
    plan_x = times["plan rag_offline.yaml --json"] / bare
    noop_x = times["build tiny.yaml (no-op: all cached, release unchanged)"] / times["plan tiny.yaml"]
    print(f"goal: plan <= 10x a bare interpreter: {plan_x:.1f}x ({'met' if plan_x <= 10 else 'missed'})")
    print(f"goal: no-op build <= 1.3x the plan of the same manifest: {noop_x:.2f}x "
          f"({'met' if noop_x <= 1.3 else 'missed'})")


if __name__ == "__main__":
    main()
