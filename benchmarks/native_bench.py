"""Native runner vs the Python runtime on the same programs, in one run, side by side.

    .venv/bin/python benchmarks/native_bench.py BUNDLE_DIR [PROGRAM ...]

For each program's forward at its largest declared input shapes: cold start (wall time of a whole
process that opens the bundle, checks it, loads the method and makes one call) and the median
per-call latency over 20 calls, for
`deployc-runner` (built by `deployc native build`) and for the Python runtime (`deployc.runtime`).
For a bundle with a pipeline (e.g. the RAG bundle), also: the end-to-end answer latency after load
(every stage, text in, answer out), first-token latency and per-token latency, native vs `deployc
run`'s runtime in-process; and tokenizer throughput (520 strings, tests/helpers/tokenizer_strings.py) of the
native tokenizer vs Python's `tokenizers`.
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
""" % CALLS  # noqa: UP031 - the script text has braces of its own


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


PIPELINE = r"""
import json, sys, time
from pathlib import Path
from deployc.runtime.pipeline_runner import Bundle
bundle = Bundle(Path(sys.argv[1]))
query = sys.argv[2]
bundle.run({"query": query})  # loads every program
config = bundle.config
gen = next(s for s in config["pipeline"]["stages"] if s["op"] == "generate")
params = json.loads(gen["params_json"])
rows = []
for _ in range(int(sys.argv[3])):
    result = bundle.run({"query": query})
    t = time.perf_counter()
    out = bundle.stage(gen, {"prompt": sys.argv[4]}, {**params, "max_new_tokens": 1})
    first = (time.perf_counter() - t) * 1000
    rows.append({"total_ms": sum(result["latency_ms"].values()), "first_token_ms": first,
                 "answer_ms": result["latency_ms"][gen["name"]]})
print(json.dumps(rows))
"""


def _median(values: list[float]) -> float:
    values = sorted(values)
    return values[len(values) // 2]


def pipeline_rows(bundle: Path, runs: int = 7) -> None:
    query = "How do honeybees find flowers?"
    native = []
    for _ in range(runs):
        out = subprocess.run([str(RUNNER), str(bundle), "--pipeline", "--text", f"query={query}"], check=True,
                             capture_output=True, text=True).stdout
        native.append(json.loads(out))
    prompt = native[0]["stages"]["prompt"]["text"]
    python = json.loads(subprocess.run([sys.executable, "-c", PIPELINE, str(bundle), query, str(runs), prompt],
                                       check=True, capture_output=True, text=True).stdout)
    gen = [n["generation"] for n in native]
    rows = [("answer, text in -> text out (after load)", _median([sum(n["latency_ms"].values()) for n in native]),
             _median([r["total_ms"] for r in python])),
            ("first token (tokenize prompt + prefill)", _median([g["first_token_ms"] for g in gen]),
             _median([r["first_token_ms"] for r in python])),
            (f"generate stage, {gen[0]['tokens']} tokens", _median([n["latency_ms"]["answer"] for n in native]),
             _median([r["answer_ms"] for r in python]))]
    per_token = _median([g["per_token_ms"] for g in gen])
    load = _median([n["load_ms"] for n in native])
    print(f"\nRAG pipeline, {query!r}, median of {runs} (native per-token {per_token:.3f} ms, load {load:.1f} ms, "
          f"{native[0]['threads']} threads)")
    print(f"{'measure':<44} {'native':>10} {'python':>10} {'python/native':>14}")
    for name, n, p in rows:
        print(f"{name:<44} {n:>8.2f}ms {p:>8.2f}ms {p / max(n, 1e-9):>13.1f}x")
    tokenizer_rows(bundle)


def tokenizer_rows(bundle: Path) -> None:
    sys.path.insert(0, str(REPO / "tests"))
    from tokenizer_strings import strings
    from tokenizers import Tokenizer

    texts = strings() * 4
    path = next((bundle / "assets" / "tokenizers").glob("*.json"))
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "s.json").write_text(json.dumps(texts))
        native = [json.loads(subprocess.run([str(RUNNER), "--tokenize", str(path), "--strings",
                                             str(Path(tmp) / "s.json")], check=True, capture_output=True,
                                            text=True).stdout)["encode_ms"] for _ in range(5)]
    tk = Tokenizer.from_file(str(path))
    tk.no_padding()
    tk.no_truncation()
    python = []
    for _ in range(5):
        t = time.perf_counter()
        for text in texts:
            tk.encode(text)
        python.append((time.perf_counter() - t) * 1000)
    n, p = _median(native), _median(python)
    print(f"{'tokenizer ' + path.name + f', {len(texts)} strings one by one':<44} {n:>8.2f}ms {p:>8.2f}ms "
          f"{p / n:>13.1f}x  ({len(texts) / n * 1000:,.0f} vs {len(texts) / p * 1000:,.0f} strings/s)")


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
    if config.get("pipeline"):
        pipeline_rows(bundle)


if __name__ == "__main__":
    main()
