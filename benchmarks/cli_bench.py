"""How fast the commands that must feel instant are, against a bare interpreter start, in one run.

    .venv/bin/python benchmarks/cli_bench.py [--runs N]

Each command runs N times (default 7) in a fresh process; the median wall time is compared with
`python -c pass` (the floor any command pays) and with `python -c "import torch"` (what validate and
plan must never pay). Targets: validate and plan well under a second; `build --plan` of a fully cached
plan close to `plan`. Timings on a shared 2-core machine are noisy: rerun before trusting one figure.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))
from build_suite import TINY  # noqa: E402  - the one-model manifest the tests build many times


def _bomb(levels: int) -> str:
    lines = ['a0: &a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    lines += [f"a{i}: &a{i} [{','.join([f'*a{i - 1}'] * 9)}]" for i in range(1, levels)]
    return "\n".join(lines) + "\n"


def median_s(cmd: list[str], cwd: Path, runs: int, expect: int = 0) -> float:
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
        times.append(time.perf_counter() - t)
        if proc.returncode != expect:
            raise SystemExit(f"{' '.join(cmd)} failed:\n{proc.stderr[-2000:]}")
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=7)
    runs = parser.parse_args().runs
    work = Path(tempfile.mkdtemp(prefix="deployc-cli-bench-"))
    try:
        shutil.copytree(REPO / "manifests" / "models", work / "models")
        (work / "tiny.yaml").write_text(TINY)
        deployc = [sys.executable, "-m", "deployc"]
        rag = str(REPO / "manifests" / "rag_offline.yaml")
        subprocess.run([*deployc, "build", "tiny.yaml", "--cache-dir", "c", "--out", "o"], cwd=work, check=True,
                       capture_output=True)
        subprocess.run([*deployc, "plan", "tiny.yaml", "--cache-dir", "c", "--out", "tiny.plan.json"], cwd=work,
                       check=True, capture_output=True)
        bare = median_s([sys.executable, "-c", "pass"], work, runs)
        torch = median_s([sys.executable, "-c", "import torch"], work, max(3, runs // 2))
        (work / "bomb.yaml").write_text(_bomb(9))
        rows = [
            ("deployc validate bomb.yaml (an alias bomb: refused)",
             median_s([*deployc, "validate", "bomb.yaml"], work, runs, expect=2), "< 1 s"),
            ("deployc validate rag_offline.yaml", median_s([*deployc, "validate", rag], work, runs), "< 1 s"),
            ("deployc plan rag_offline.yaml --json", median_s([*deployc, "plan", rag, "--json"], work, runs), "< 1 s"),
            ("deployc plan tiny.yaml --out plan.json",
             median_s([*deployc, "plan", "tiny.yaml", "--cache-dir", "c", "--out", "p.json"], work, runs), "< 1 s"),
            ("deployc build tiny.yaml (all cached)",
             median_s([*deployc, "build", "tiny.yaml", "--cache-dir", "c", "--out", "o"], work, runs), "< 1.5 s"),
            ("deployc build --plan (all cached)",
             median_s([*deployc, "build", "--plan", "tiny.plan.json", "--cache-dir", "c", "--out", "o"], work, runs),
             "< 1.5 s"),
        ]
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"python -c pass: {bare * 1000:.0f} ms; python -c 'import torch': {torch * 1000:.0f} ms ({runs} runs, median)")
    print(f"{'command':<52} {'median':>9} {'/ bare python':>14} {'/ import torch':>15}  target")
    for name, seconds, target in rows:
        print(f"{name:<52} {seconds * 1000:>6.0f} ms {seconds / bare:>13.1f}x {seconds / torch:>14.2f}x  {target}")


if __name__ == "__main__":
    main()
