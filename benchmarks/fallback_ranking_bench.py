"""The float fallback's ranking (graph/sensitivity.py): each observer alone on, its worst SQNR over the
held-out samples, measured two ways side by side on the same calibrated model: the whole model run once per
observer and sample (as before 2026-12-05), and only what is downstream of the observer, from one recorded
float run per sample (what builds do). Prints both times, their ratio, and whether every figure is equal.

    .venv/bin/python benchmarks/fallback_ranking_bench.py [ARCH ...]      (default: cvt)

Each architecture of benchmarks/hf_zoo.py is prepared with XNNPACK's w8a8 quantizer as the build does
(symmetric per-channel, the residual stream's norm-feeding additions float), calibrated on 16 generated
samples and ranked on 16 others: the build's sample counts.
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
SAMPLES = 16


def _prepared(model: Any, task: str) -> Any:
    import torch
    from executorch.backends.xnnpack.quantizer.xnnpack_quantizer import (
        XNNPACKQuantizer,
        get_symmetric_quantization_config,
    )
    from torchao.quantization.pt2e.quantize_pt2e import prepare_pt2e

    from deployc.graph.quantize import float_paths_only
    from deployc.targets.backends import xnnpack

    quantizer = (XNNPACKQuantizer().set_global(get_symmetric_quantization_config(is_per_channel=True))
                 .set_filter_function(xnnpack._off_the_residual_stream))
    ep = torch.export.export(model, _inputs(model, task, SEQ, 0), strict=False)
    prepared = prepare_pt2e(ep.module(), float_paths_only(quantizer))
    for i in range(SAMPLES):
        prepared(*_inputs(model, task, SEQ, 100 + i))
    return prepared


def main() -> None:
    import torch

    from deployc.graph import sensitivity
    from deployc.graph.hf_model import load_directory

    torch.set_num_threads(1)  # as in a build's worker
    names = sys.argv[1:] or ["cvt"]
    archs = [a for a in ARCHS if a.name in names]
    print(f"{'architecture':14} {'observers':>9} {'whole model s':>14} {'downstream s':>13} {'ratio':>6}  equal")
    with tempfile.TemporaryDirectory() as tmp:
        save(archs, Path(tmp))
        for arch in archs:
            model = load_directory(Path(tmp) / arch.name, arch.task)
            prepared = _prepared(model, arch.task)
            samples = [list(_inputs(model, arch.task, SEQ, 1000 + i)) for i in range(SAMPLES)]
            with sensitivity._switched(prepared) as switches:
                for s in switches.values():
                    s.on = False
                with torch.no_grad():
                    references = [sensitivity._flat(prepared(*sample)) for sample in samples]
                start = time.perf_counter()
                whole = sensitivity._solo_sqnr_whole(prepared, switches, samples, references)
                whole_s = time.perf_counter() - start
                start = time.perf_counter()
                downstream = sensitivity._solo_sqnr(prepared, switches, samples, references)
                downstream_s = time.perf_counter() - start
            equal = sum(whole[n] == downstream[n] for n in whole)
            print(f"{arch.name:14} {len(whole):9d} {whole_s:14.1f} {downstream_s:13.1f} {whole_s / downstream_s:5.1f}x"
                  f"  {equal}/{len(whole)}", flush=True)


if __name__ == "__main__":
    main()
