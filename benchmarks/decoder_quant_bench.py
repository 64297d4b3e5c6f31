"""The demo decoder (manifests/decoder, trained here) in every CPU scheme, side by side in one run: the
table a user reads to choose a quantization for a decoder.

    .venv/bin/python benchmarks/decoder_quant_bench.py              # arduino_q's CPU (XNNPACK)
    .venv/bin/python benchmarks/decoder_quant_bench.py --unit npu   # snapdragon's NPU, beside XNNPACK 8da4w

`--unit npu` builds the decoder's static form (prefill 32, context 384: rag_offline's) for snapdragon's NPU
in fp16, 16a8w, 16a4w and w8a8, verified on QNN's x86 HTP emulator, beside arduino_q's XNNPACK 8da4w
program of the same decoder, and prints the lowering time and the emulator's time per decode call and per
32-token prefill call: an emulator's figures, not a phone's (the emulator runs quantized graphs slower than
fp16 ones; a phone's HTP the other way round).

Builds it for arduino_q's CPU (XNNPACK) in fp32, 8da8w, 8da4w with groups of 32 and 128, and w8a8, cold
in a temp dir, each verified by the build on the decoder's held-out text (manifests/decoder/heldout.txt:
documentation paragraphs it was not trained on). Prints the .pte size, perplexity against eager fp32's,
mean KL divergence, top-1 agreement, greedy parity, and host decode speed: tokens per second of the
bundle's program through the ExecuTorch runtime on this x86 machine (2 cores), greedy from one prompt
after its prefill; not a phone's figure. Tolerances are switched off (`enabled` stays, the figures are
what is measured), so a scheme that would miss its defaults is still shown.
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
# name -> quantization as the manifest writes it
SCHEMES = {"fp32": "fp32", "8da8w": "8da8w", "8da4w_g32": "{scheme: 8da4w, group_size: 32}",
           "8da4w_g128": "{scheme: 8da4w, group_size: 128}", "w8a8": "w8a8"}
LOOSE = "{max_perplexity_ratio: 100.0, max_kl: 100.0, min_top1: 0.0, min_cosine: -1.0, min_sqnr_db: -300.0}"
DECODE_TOKENS = 64


def _model(scheme: str) -> str:
    return f"llm_{scheme}"  # a model name starts with a letter


def _decode_speed(bundle_dir: Path, model: str) -> float:
    """Tokens per second of greedy decoding after a 32-token prefill, the program through the runtime."""
    import numpy as np

    from deployc.runtime.pipeline_runner import Bundle

    bundle = Bundle(bundle_dir)
    prompt = np.arange(1, 33, dtype=np.int64).reshape(1, -1)
    bundle.call(model, [prompt, np.arange(32, dtype=np.int64)])  # prefill (and the first load)
    token = np.asarray([[5]], dtype=np.int64)
    start = time.perf_counter()
    for i in range(DECODE_TOKENS):
        logits = bundle.call(model, [token, np.asarray([32 + i], dtype=np.int64)])[0]
        token = np.asarray([[int(np.argmax(logits))]], dtype=np.int64)
    return DECODE_TOKENS / (time.perf_counter() - start)


NPU_SCHEMES = {"fp16": "fp16", "16a8w": "16a8w", "16a4w": "16a4w", "w8a8": "w8a8"}
NPU = "npu: {prefill: 32, context: 384}"  # rag_offline's


def _npu_calls(bundle_dir: Path, model: str) -> tuple[float, float]:
    """Seconds per decode call and per prefill call of a static decoder on the emulator (medians)."""
    import statistics

    import numpy as np

    from deployc.runtime.pipeline_runner import Bundle

    bundle = Bundle(bundle_dir)
    times: dict[str, list[float]] = {"prefill": [], "decode": []}
    call = bundle._call

    def timed(program: str, tensors: list[np.ndarray], method: str) -> list[np.ndarray]:
        start = time.perf_counter()
        out = call(program, tensors, method)
        times[method].append(time.perf_counter() - start)
        return out

    bundle._call = timed  # type: ignore[method-assign]
    bundle.call(model, [np.arange(1, 97, dtype=np.int64).reshape(1, -1), np.arange(96, dtype=np.int64)])
    for i in range(16):
        bundle.call(model, [np.asarray([[5]], dtype=np.int64), np.asarray([96 + i], dtype=np.int64)])
    return statistics.median(times["decode"]), statistics.median(times["prefill"])


def _manifest(target: str, schemes: dict[str, str], extra: str = "") -> str:
    text = f"apiVersion: deployc/v1\nname: decoder-bench\nversion: 0.1.0\ntargets: [{target}]\nmodels:\n"
    for name, quant in schemes.items():
        text += (f"  {_model(name)}:\n    task: text-generation\n    source: {{huggingface: decoder}}\n"
                 f"    dims: {{seq: {{min: 1, max: 384}}}}\n    quantization: {quant}\n"
                 f"    verify: {{text: decoder/heldout.txt, {LOOSE[1:]}\n{extra}")
    return text


def _build(work: Path, text: str, name: str) -> list[dict]:
    (work / name).write_text(text)
    proc = subprocess.run([sys.executable, "-m", "deployc", "build", name, "--json", "--jobs", "2", "--cache-dir",
                           "cache", "--out", "dist"], cwd=work, capture_output=True, text=True)
    if not proc.stdout.strip():
        raise SystemExit(f"the build printed no report (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    return list(json.loads(proc.stdout)["units"])


def main() -> None:
    npu = "--unit" in sys.argv and sys.argv[sys.argv.index("--unit") + 1] == "npu"
    with tempfile.TemporaryDirectory(prefix="deployc-decoder-") as tmp:
        work = Path(tmp)
        shutil.copytree(REPO / "manifests" / "decoder", work / "decoder")
        start = time.perf_counter()
        if npu:
            report = _build(work, _manifest("snapdragon", NPU_SCHEMES, f"    {NPU}\n    overrides:\n      "
                                                                         "snapdragon: {unit: npu}\n"), "npu.yaml")
            report += _build(work, _manifest("arduino_q", {"8da4w": "8da4w"}), "cpu.yaml")
            _npu_table(work, report, time.perf_counter() - start)
            return
        built = _build(work, _manifest("arduino_q", SCHEMES), "bench.yaml")
        units = {u["model"].removeprefix("llm_"): u for u in built}
        elapsed = time.perf_counter() - start
        bundle = work / "dist" / "decoder-bench" / "0.1.0" / "arduino_q"
        speed = {name: _decode_speed(bundle, _model(name)) for name in SCHEMES if units[name]["status"] != "failed"}
    print(f"{'scheme':<11} {'size':>11} {'ratio':>6} {'ppl':>8} {'fp32 ppl':>9} {'ppl x':>7} {'KL':>8} {'top-1':>6} "
          f"{'tokens':>14} {'tok/s':>7} {'x fp32':>7}")
    base_size = units["fp32"].get("size_bytes") or 1
    for name in SCHEMES:
        u = units[name]
        if u["status"] == "failed":
            print(f"{name:<11} FAILED: {u['failure']['error'][:100]}")
            continue
        t, ppl, ref, tokens = _figures(u)
        print(f"{name:<11} {u['size_bytes']:>11,} {u['size_bytes'] / base_size:>5.2f}x {ppl:>8.3f} {ref:>9.3f} "
              f"{ppl / ref:>6.4f}x {t.get('kl', 0):>8.5f} {t.get('top1', 0):>6.1%} {tokens:>14} "
              f"{speed[name]:>7.1f} {speed[name] / speed['fp32']:>6.2f}x")
    positions = next((u["verification"]["text"]["positions"] for u in units.values()
                      if (u.get("verification") or {}).get("text")), 0)
    print(f"\n{len(units)} programs in {elapsed:.0f} s; perplexity, KL and top-1 over {positions} positions of "
          "decoder/heldout.txt; tokens: leading greedy tokens equal to eager fp32's on the worst prompt (prompts "
          f"whose every token is); tok/s: host decode of {DECODE_TOKENS} tokens, x86, 2 cores, not a phone")


def _figures(unit: dict) -> tuple[dict, float, float, str]:
    """A unit's held-out text figures, its perplexity and eager's, and its greedy parity as a cell."""
    v = unit["verification"]
    t, g = v.get("text") or {}, v.get("tokens") or {}
    tokens = f"{g.get('matched', 0)}/{g.get('generated', 0)} ({g.get('identical', 0)}/{g.get('prompts', 0)})"
    return t, t.get("perplexity", 0.0), t.get("reference_perplexity", 1.0), tokens


def _npu_table(work: Path, report: list[dict], elapsed: float) -> None:
    """The NPU's programs (snapdragon) beside XNNPACK's 8da4w (arduino_q)."""
    units = {(u["model"].removeprefix("llm_"), u["target"]): u for u in report}
    print(f"{'scheme':<14} {'size':>11} {'lower s':>8} {'ppl x':>7} {'KL':>8} {'top-1':>6} {'tokens':>14} "
          f"{'decode s':>9} {'prefill s':>10} {'status':>7}")
    for name in NPU_SCHEMES | {"8da4w": ""}:
        target = "snapdragon" if name in NPU_SCHEMES else "arduino_q"
        u = units[(name, target)]
        label = f"{name} ({'npu' if target == 'snapdragon' else 'cpu'})"
        if u["status"] == "failed" and not u.get("size_bytes"):
            print(f"{label:<14} FAILED at {u['failure']['step']}: {u['failure']['error'][:100]}")
            continue
        t, ppl, ref, tokens = _figures(u)
        bundle = work / "dist" / "decoder-bench" / "0.1.0" / target
        if target == "snapdragon":
            decode, prefill = _npu_calls(bundle, _model(name))
        else:
            decode, prefill = 1.0 / _decode_speed(bundle, _model(name)), 0.0
        print(f"{label:<14} {u['size_bytes']:>11,} {u['durations_s'].get('lower', 0):>8.1f} {ppl / ref:>6.4f}x "
              f"{t.get('kl', 0):>8.5f} {t.get('top1', 0):>6.1%} {tokens:>14} {decode:>9.3f} {prefill:>10.3f} "
              f"{u['verification']['status']:>7}")
    print(f"\n{len(units)} programs in {elapsed:.0f} s. npu rows: the static form (prefill 32, context 384) on QNN's "
          "x86 HTP emulator, held-out text read in prefill chunks, greedy parity through decode calls; decode s / "
          "prefill s: the emulator's seconds per call (not a phone's). cpu row: XNNPACK on this x86 host.")


if __name__ == "__main__":
    main()
