"""Which layers' static int8 costs a model its accuracy on the CPU (XNNPACK w8a8), one node at a time.

    .venv/bin/python benchmarks/xnnpack_sensitivity.py ARCH [ARCH ...]

Each architecture of benchmarks/hf_zoo.py is quantized with deployc's XNNPACK w8a8 recipe (PT2E,
symmetric per-channel weights, histogram observers, the residual stream's norm-feeding additions left
float), calibrated on 16 generated samples; then once more per quantizable node with that node alone
left float. Each variant's simulated (fake-quantized) model runs on the CPU against eager fp32 on 3 other
samples (the quantization error alone, without lowering). Prints the worst SQNR of the recipe and the
six nodes whose float version gains most. Slow: one calibration per node (MobileNetV2: 99 nodes, 11 min).
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from hf_zoo import ARCHS, save
from qnn_plain import _inputs

SEQ = 16
OPS = ("linear", "conv", "add", "mul", "matmul", "bmm", "cat", "relu", "hardtanh", "pool", "mean", "softmax", "sub",
       "div")


def _variant(model: Any, task: str, keep: Any) -> float:
    import torch
    from executorch.backends.xnnpack.quantizer.xnnpack_quantizer import (
        XNNPACKQuantizer,
        get_symmetric_quantization_config,
    )
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    from deployc.graph.metrics import compare
    from deployc.graph.quantize import float_paths_only
    from deployc.targets.backends import xnnpack

    quantizer = XNNPACKQuantizer().set_global(get_symmetric_quantization_config(is_per_channel=True))
    quantizer.set_filter_function(lambda n: xnnpack._off_the_residual_stream(n) and keep(n))
    ep = torch.export.export(model, _inputs(model, task, SEQ, 0), strict=False)
    prepared = prepare_pt2e(ep.module(), float_paths_only(quantizer))
    for i in range(16):
        prepared(*_inputs(model, task, SEQ, 100 + i))
    simulated = convert_pt2e(prepared)
    worst = 300.0
    for i in range(3):
        x = _inputs(model, task, SEQ, 1000 + i)
        with torch.no_grad():
            ref, out = model(*x), simulated(*x)
        ref = ref[0] if isinstance(ref, (tuple, list)) else ref
        out = out[0] if isinstance(out, (tuple, list)) else out
        worst = min(worst, compare(ref.numpy(), out.numpy()).sqnr_db)
    return worst


def main() -> None:
    import torch

    from deployc.graph.hf_model import load_directory

    archs = [a for a in ARCHS if a.name in sys.argv[1:]]
    with tempfile.TemporaryDirectory() as tmp:
        save(archs, Path(tmp))
        for arch in archs:
            model = load_directory(Path(tmp) / arch.name, arch.task)
            start = time.perf_counter()
            base = _variant(model, arch.task, lambda n: True)
            graph = torch.export.export(model, _inputs(model, arch.task, SEQ, 0), strict=False).module().graph
            names = [n.name for n in graph.nodes if n.op == "call_function" and any(o in str(n.target) for o in OPS)]
            gains = sorted(((_variant(model, arch.task, lambda n, name=name: n.name != name) - base, name)
                            for name in names), reverse=True)
            print(f"{arch.name}: w8a8 {base:.1f} dB ({len(names)} nodes, {time.perf_counter() - start:.0f} s); left "
                  "float alone, the most gained: " + ", ".join(f"{n} {g:+.1f}" for g, n in gains[:6]), flush=True)


if __name__ == "__main__":
    main()
