"""The Snapdragon NPU (QNN) against XNNPACK, in one run, side by side.

    .venv/bin/python benchmarks/qnn_bench.py

1. A conv net and an attention block (tests/helpers/suites.py), each built for the NPU in every QNN scheme
   and for XNNPACK (fp32 and w8a8): lowering time, .pte size, and the error against eager fp32 as the
   build measured it (QNN through the x86 HTP emulator, not a phone).
2. The offline RAG example's retrieval on snapdragon (embedder on the NPU, fp16, 128 tokens) and on
   arduino_q (XNNPACK, 8da8w) for the same questions: right passage first / in the top 3, and the
   query embedding's latency on this host (the emulator is slow; phone speed is not measured here).
Needs the QNN host libraries (`pip install 'deployc[qnn]'`). Cold caches under a temp dir.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))
from helpers.suites import QNN_SCHEMES  # noqa: E402
from test_rag import QUESTIONS  # noqa: E402

MODELS = {"conv": ("models.small:convnet", "image", "[1, 3, 32, 32]", "[0.0, 1.0]"),
          "attention": ("models.small:attention_block", "x", "[1, 32, 64]", "[-1.0, 1.0]")}


def _manifest(target: str, schemes: list[str]) -> str:
    text = f"apiVersion: deployc/v1\nname: bench-{target.replace('_', '-')}\nversion: 0.1.0\ntargets: [{target}]\n" \
           "models:\n"
    for name, (factory, arg, shape, value_range) in MODELS.items():
        for s in schemes:
            calibration = ", calibration: {samples: 16}" if s not in ("fp16", "fp32") else ""
            text += (f"  {name}_{s}:\n    source: {{factory: \"{factory}\"}}\n"
                     f"    inputs:\n      {arg}: {{shape: {shape}, range: {value_range}}}\n"
                     f"    quantization: {{scheme: {s}{calibration}}}\n"
                     + ("    overrides:\n      arduino_q: {unit: cpu}\n" if target == "arduino_q" else ""))
    return text


def _build(work: Path, manifest: str, name: str) -> dict:
    (work / f"{name}.yaml").write_text(manifest)
    proc = subprocess.run([sys.executable, "-m", "deployc", "build", f"{name}.yaml", "--cache-dir", f"cache-{name}",
                           "--out", "dist", "--json", "--jobs", "1"], cwd=work, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"build of {name} failed:\n{proc.stderr[-3000:]}")
    return {u["model"]: u for u in json.loads(proc.stdout)["units"]}


def programs(work: Path) -> None:
    npu = _build(work, _manifest("snapdragon", QNN_SCHEMES), "npu")
    cpu = _build(work, _manifest("arduino_q", ["fp32", "w8a8"]), "cpu")
    print(f"{'model':<10} {'unit':<12} {'scheme':<7} {'lower s':>8} {'size':>10} {'vs xnnpack fp32':>16} "
          f"{'cosine':>9} {'SQNR dB':>8}")
    for name in MODELS:
        ref = cpu[f"{name}_fp32"]["size_bytes"]
        for u in [cpu[f"{name}_fp32"], cpu[f"{name}_w8a8"], *(npu[f"{name}_{s}"] for s in QNN_SCHEMES)]:
            m = u["verification"]["metrics"]
            print(f"{name:<10} {u['unit'] + ' (' + u['backend'][:3] + ')':<12} {u['quantization']:<7} "
                  f"{u['durations_s']['lower']:>8.1f} {u['size_bytes']:>10,} {u['size_bytes'] / ref:>15.2f}x "
                  f"{m['min_cosine']:>9.5f} {m['min_sqnr_db']:>8.1f}")


def retrieval(work: Path) -> None:
    shutil.copytree(REPO / "manifests", work / "manifests", ignore=shutil.ignore_patterns("__pycache__"))
    proc = subprocess.run([sys.executable, "-m", "deployc", "build", "manifests/rag_offline.yaml", "--cache-dir",
                           "cache-rag", "--out", "dist", "--json"], cwd=work, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"build of rag_offline failed:\n{proc.stderr[-3000:]}")
    from deployc.runtime.pipeline_runner import Bundle

    print(f"\n{'target':<11} {'embedder':<22} {'right first':>12} {'right in top 3':>15} {'query embedding':>16}")
    tops: dict[str, list[list[str]]] = {}
    for target in ("arduino_q", "snapdragon"):
        bundle = Bundle(work / "dist" / "rag-offline" / "1.0.0" / target)
        config = json.loads((bundle.folder / "runtime.json").read_text())
        tokenize = json.loads(next(s for s in config["pipeline"]["stages"] if s["op"] == "tokenize")["params_json"])
        embedder = next(p for p in config["programs"] if p["name"] == "embedder")
        first = top3 = 0
        times = []
        tops[target] = []
        for question, source in QUESTIONS.items():
            tokens = bundle.stage({"op": "tokenize"}, {"input": question}, tokenize)
            t = time.perf_counter()
            emb = bundle.call("embedder", [tokens["input_ids"], tokens["attention_mask"]])[0]
            times.append(time.perf_counter() - t)
            search = {"index": "assets/indexes/docs.json", "top_k": 3}
            found = [c["source"] for c in bundle.stage({"op": "vector_search"}, {"query": emb}, search)["chunks"]]
            tops[target].append(found)
            first += found[0] == source
            top3 += source in found
        times.sort()
        print(f"{target:<11} {embedder['unit'] + ' ' + embedder['backend'] + ' ' + embedder['quantization']:<22} "
              f"{first:>7}/{len(QUESTIONS):<4} {top3:>10}/{len(QUESTIONS):<4} "
              f"{times[len(times) // 2] * 1000:>13.1f} ms")
    same = sum(a == b for a, b in zip(tops["arduino_q"], tops["snapdragon"]))
    print(f"same top-3 on both targets: {same}/{len(QUESTIONS)} questions")


def main() -> None:
    work = Path(tempfile.mkdtemp(prefix="deployc-qnn-bench-"))
    try:
        shutil.copytree(REPO / "manifests" / "models", work / "models", ignore=shutil.ignore_patterns("__pycache__"))
        programs(work)
        retrieval(work)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
