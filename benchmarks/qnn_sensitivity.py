"""Which operators' 8-bit activations cost a model its accuracy on the NPU, by kind of operator, in one run.

    .venv/bin/python benchmarks/qnn_sensitivity.py ARCH [ARCH ...] [--samples 16]

Each architecture of benchmarks/hf_zoo.py is quantized with deployc's QNN recipe (QnnQuantizer,
per-channel weights, MinMax observers, calibrated on the same kind of generated samples the build
uses) in w8a8, then again with the activations of one kind of operator (softmax, layer norm, matmul,
...) at 16 bits and every other at 8, then with deployc's w8a8 rule (qnn.W8A8_16BIT_OPS at 16 bits),
then all at 16 bits (16a8w). Each variant's simulated (fake-quantized) model is run on the CPU
against eager fp32 on 3 other samples: this is the quantization error alone, without lowering or the
HTP emulator (the build measures those), which makes one variant take seconds, not a minute. Prints
per architecture the worst SQNR (dB) of each variant: the kinds whose 16 bits gain most are the
sensitive layers.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from hf_zoo import ARCHS, NPU_SEQ, save
from qnn_plain import _inputs

SHAPE_OPS = {"getitem", "view", "reshape", "permute", "transpose", "expand", "unsqueeze", "squeeze", "flatten",
             "select", "slice", "clone", "dropout", "contiguous", "arange", "scalar_tensor"}


def _variant(model: Any, task: str, scheme: str, bits: dict[str, int], samples: int) -> float:
    import torch
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    from deployc.core.quantization import Recipe
    from deployc.graph.metrics import compare
    from deployc.targets.backends.qnn import BACKEND

    quantizer = BACKEND.quantizer(Recipe(scheme=scheme, method="pt2e"), {}, activation_bits=bits)
    example = _inputs(model, task, NPU_SEQ, 0)
    prepared = prepare_pt2e(torch.export.export(model, example, strict=False).module(), quantizer)
    for i in range(samples):
        prepared(*_inputs(model, task, NPU_SEQ, 100 + i))
    simulated = convert_pt2e(prepared)
    worst = 300.0
    for i in range(3):
        x = _inputs(model, task, NPU_SEQ, 1000 + i)
        with torch.no_grad():
            worst = min(worst, compare(model(*x).numpy(), simulated(*x).numpy()).sqnr_db)
    return worst


def _kinds(model: Any, task: str) -> list[str]:
    """The kinds of operator QnnQuantizer annotates (after its own rewrites: attention is bmm + softmax)."""
    import torch

    from deployc.core.quantization import Recipe
    from deployc.targets.backends.qnn import BACKEND
    from deployc.targets.backends.qnn.quantizer import op_kind

    quantizer = BACKEND.quantizer(Recipe(scheme="w8a8", method="pt2e"), {}, activation_bits={})
    graph = quantizer.transform_for_annotation(
        torch.export.export(model, _inputs(model, task, NPU_SEQ, 0), strict=False).module()).graph
    found = {op_kind(n) for n in graph.nodes if n.op == "call_function"}
    return sorted(found - SHAPE_OPS)


def main() -> None:
    from deployc.graph.hf_model import load_directory
    from deployc.targets.backends.qnn import BACKEND
    from deployc.targets.backends.qnn.quantizer import W8A8_16BIT_OPS

    parser = argparse.ArgumentParser()
    parser.add_argument("archs", nargs="+")
    parser.add_argument("--samples", type=int, default=16)
    args = parser.parse_args()
    BACKEND.activate()
    with tempfile.TemporaryDirectory() as tmp:
        archs = [a for a in ARCHS if a.name in args.archs]
        save(archs, Path(tmp))
        for arch in archs:
            model = load_directory(Path(tmp) / arch.name, arch.task)

            def run(scheme: str, bits: dict[str, int], model: Any = model, task: str = arch.task) -> float:
                return _variant(model, task, scheme, bits, args.samples)

            w8a8, a16 = run("w8a8", {}), run("16a8w", {})
            rule = run("w8a8", dict.fromkeys(W8A8_16BIT_OPS, 16))
            kinds = _kinds(model, arch.task)
            gain = sorted(((run("w8a8", {k: 16}) - w8a8, k) for k in kinds), reverse=True)[:3]
            loss = sorted((run("16a8w", {k: 8}) - a16, k) for k in kinds)[:3]
            print(f"{arch.name:<14} w8a8 {w8a8:5.1f} dB, rule {rule:5.1f}, 16a8w {a16:5.1f} | alone at 16 in w8a8: "
                  + ", ".join(f"{k} {g:+.1f}" for g, k in gain) + " | alone at 8 in 16a8w: "
                  + ", ".join(f"{k} {g:+.1f}" for g, k in loss), flush=True)


if __name__ == "__main__":
    main()
