"""How fast the commands that must feel instant are, against a bare interpreter start, in one run.

    .venv/bin/python benchmarks/cli_bench.py [--runs N]

Each command runs N times (default 7) in a fresh process, twice over: in full (DEPLOYC_STAMP=off) and
answered from its stamp (deployc/stamp.py: the same command again with nothing it looked at changed;
one run first to write the stamp). The median wall times are compared with `python -c pass` (the floor
any command pays) and with `python -c "import torch"` (what validate and plan must never pay). Targets:
validate and plan well under a second in full, `plan` <= 5x a bare interpreter when stamped; `build
--plan` of a fully cached plan close to `plan`. Timings on a shared 2-core machine are noisy: rerun
before trusting one figure.
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
from build_suite import TINY  # noqa: E402  - the one-model manifest the tests build many times


def _bomb(levels: int) -> str:
    lines = ['a0: &a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    lines += [f"a{i}: &a{i} [{','.join([f'*a{i - 1}'] * 9)}]" for i in range(1, levels)]
    return "\n".join(lines) + "\n"


def median_s(cmd: list[str], cwd: Path, runs: int, expect: int = 0, stamped: bool = False) -> float:
    # Byte-compiled modules, as an installed deployc has them (this machine sets PYTHONDONTWRITEBYTECODE).
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONDONTWRITEBYTECODE", "DEPLOYC_STAMP")}
    if not stamped:
        env["DEPLOYC_STAMP"] = "off"
    else:
        subprocess.run(cmd, cwd=cwd, capture_output=True, env=env)  # writes the stamp
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, env=env)
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
        time.sleep(1.1)  # files written this close to a run are not trusted by a stamp (coarse timestamps)
        commands = [
            ("deployc validate bomb.yaml (an alias bomb: refused)", [*deployc, "validate", "bomb.yaml"], 2,
             "< 1 s"),
            ("deployc validate rag_offline.yaml", [*deployc, "validate", rag], 0, "< 1 s"),
            ("deployc plan rag_offline.yaml --json", [*deployc, "plan", rag, "--json"], 0, "< 1 s; stamped <= 5x"),
            ("deployc plan tiny.yaml --out plan.json",
             [*deployc, "plan", "tiny.yaml", "--cache-dir", "c", "--out", "p.json"], 0, "< 1 s; stamped <= 5x"),
            ("deployc build tiny.yaml (all cached)", [*deployc, "build", "tiny.yaml", "--cache-dir", "c", "--out", "o"],
             0, "< 1.5 s"),
            ("deployc build --plan (all cached)",
             [*deployc, "build", "--plan", "tiny.plan.json", "--cache-dir", "c", "--out", "o"], 0, "< 1.5 s"),
        ]
        rows = [(name, median_s(cmd, work, runs, expect), median_s(cmd, work, runs, expect, stamped=True), target)
                for name, cmd, expect, target in commands]
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"python -c pass: {bare * 1000:.0f} ms; python -c 'import torch': {torch * 1000:.0f} ms "
          f"({runs} runs, median)")
    print(f"{'command':<52} {'full':>7} {'/ bare':>7} {'/ torch':>8} {'stamped':>8} {'/ bare':>7}  target")
    for name, full, stamped, target in rows:
        print(f"{name:<52} {full * 1000:>4.0f} ms {full / bare:>6.1f}x {full / torch:>7.2f}x {stamped * 1000:>5.0f} ms "
              f"{stamped / bare:>6.1f}x  {target}")


if __name__ == "__main__":
    main()
