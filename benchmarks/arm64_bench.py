"""What checking CPU programs on arm64 kernels costs and finds, in one run (#30).

    .venv/bin/python benchmarks/arm64_bench.py [--questions N]

Builds the example manifests (rag_offline.yaml, small_models.yaml) cold in a temp dir, with the arm64 check
on (the default), then for every program of an arm64 device's CPU unit (arduino_q cpu, snapdragon cpu):
- the largest difference between the arm64 runtime's outputs (the native runner cross-built for arm64,
  under qemu-aarch64 emulating the profile's CPU) and the x86 runtime's (this host's ExecuTorch) on the
  program's self-test inputs: worst cosine and max abs error over every output of every case;
- what the build judged against eager PyTorch on each (x86 and arm64 figures from the report);
- for the RAG decoder: `deployc run` against `deployc run --arch aarch64` on the demo's questions: are
  the answers (greedy tokens) the same?
and the time the arm64 check added to the cold build (its qemu runs; the runner itself is built once per
machine and reused: its build time is printed apart, measured into a temp folder).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
MANIFESTS = ("rag_offline.yaml", "small_models.yaml")


def _build(project: Path, manifest: str, out: Path, cache: Path) -> tuple[dict[str, Any], float]:
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "deployc", "build", manifest, "--out", str(out), "--cache-dir",
                           str(cache), "--json"], cwd=project, capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    if not proc.stdout.strip():
        raise SystemExit(f"{manifest}: no report (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout), elapsed


def _compare(bundle: Path, program: str, runner: Any, cpu: str, scratch: Path) -> tuple[float, float, int]:
    """(worst cosine, max abs) of arm64 against x86 outputs over the program's self-test cases."""
    import numpy as np

    from deployc.core import self_test_vectors
    from deployc.graph.metrics import compare
    from deployc.runtime.pipeline_runner import Bundle

    cases = [c for c in self_test_vectors.read(bundle / "selftest" / f"{program}.json") if "target" not in c]
    host = Bundle(bundle)
    worst_cos, worst_abs = 1.0, 0.0
    for i, case in enumerate(cases):
        inputs = [self_test_vectors.decode_tensor(t) for t in case["inputs"]]
        x86 = host.call(program, inputs, case["method"])
        files = []
        for j, a in enumerate(inputs):
            files += ["--input", str(scratch / f"in{i}_{j}.npy")]
            np.save(scratch / f"in{i}_{j}.npy", a)
        out = scratch / f"out{i}"
        out.mkdir()
        proc = runner.run(cpu, str(bundle), "--program", program, "--method", case["method"], *files,
                          "--output-dir", str(out))
        if proc.returncode != 0:
            raise SystemExit(f"{program}: the arm64 runner failed: {proc.stderr[-500:]}")
        for k, expected in enumerate(x86):
            m = compare(np.asarray(expected), np.load(out / f"output_{k}.npy"))
            worst_cos, worst_abs = min(worst_cos, m.cosine), max(worst_abs, m.max_abs)
    return worst_cos, worst_abs, len(cases)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--questions", type=int, default=4, help="RAG questions asked on both runtimes")
    args = parser.parse_args()
    from rag_answers import questions

    from deployc.targets import arm64_runner

    with tempfile.TemporaryDirectory(prefix="deployc-arm64-") as tmp:
        work = Path(tmp)
        start = time.perf_counter()
        arm64_runner.prepare(lambda _: None, work / "runner-build")
        runner_s = time.perf_counter() - start
        runner = arm64_runner.prepare(lambda _: None)  # the machine's (what a build uses)
        subprocess.run(["cp", "-r", str(REPO / "manifests"), str(work / "project")], check=True)
        subprocess.run(["cp", "-rL", str(REPO / "targets"), str(work / "targets")], check=True)
        rows, totals = [], []
        for manifest in MANIFESTS:
            report, elapsed = _build(work / "project", manifest, work / "dist", work / "cache")
            checked = [u for u in report["units"] if u.get("arm64")]
            arm64_s = sum(u["arm64"]["seconds"] for u in checked)
            totals.append((manifest, elapsed, arm64_s))
            for u in checked:
                bundle = Path(next(b["dir"] for t, b in report["bundles"].items() if t == u["target"]))
                scratch = work / "scratch" / f"{u['target']}-{u['model']}"
                scratch.mkdir(parents=True)
                cos, mabs, cases = _compare(bundle, u["model"], runner, u["arm64"]["cpu"], scratch)
                rows.append((manifest, u, cos, mabs, cases))
        print(f"\n{'program':<36} {'cpu':<12} {'arm64 vs x86: cos':>18} {'max abs':>9} {'x86 vs eager':>14} "
              f"{'arm64 vs eager':>15}  cases")
        for manifest, u, cos, mabs, cases in rows:
            x86, a64 = u["verification"]["metrics"], u["arm64"]["metrics"]
            name = f"{manifest.split('.')[0]}:{u['model']}@{u['target']} {u['quantization']}"
            print(f"{name:<36} {u['arm64']['cpu']:<12} {cos:>18.7f} {mabs:>9.2e} {x86['min_cosine']:>14.6f} "
                  f"{a64['min_cosine']:>15.6f}  {cases}")
        print()
        for manifest, elapsed, arm64_s in totals:
            print(f"{manifest}: cold build {elapsed:.0f} s, of which the arm64 check {arm64_s:.0f} s: "
                  f"{elapsed / max(elapsed - arm64_s, 1e-9):.2f}x the build without it")
        print(f"the arm64 runner's own build (once per machine, reused by every build): {runner_s:.0f} s")

        bundle = work / "dist" / "rag-offline" / "1.0.0" / "arduino_q"
        cpu = arm64_runner.bundle_cpu(bundle, work / "project")
        same = 0
        asked = questions()[: args.questions]
        for q in asked:
            x86 = subprocess.run([sys.executable, "-m", "deployc", "run", str(bundle), "--input",
                                  f"query={q['question']}", "--json"], capture_output=True, text=True, check=True)
            a64 = subprocess.run([sys.executable, "-m", "deployc", "run", str(bundle), "--arch", "aarch64", "--input",
                                  f"query={q['question']}", "--json"], capture_output=True, text=True, check=True,
                                 cwd=work / "project")
            ax, aa = json.loads(x86.stdout)["outputs"]["answer"], json.loads(a64.stdout)["outputs"]["answer"]
            same += ax == aa
            print(f"  {q['question'][:50]:<50} same answer on arm64 ({cpu}): {ax == aa}")
        print(f"RAG decoder (arduino_q, XNNPACK 8da4w): greedy answers equal on x86 and arm64 for {same} of "
              f"{len(asked)} questions")


if __name__ == "__main__":
    main()
