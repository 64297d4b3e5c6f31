"""The plain hand-written Qualcomm path, for comparison with deployc's NPU rows in benchmarks/coverage.py.

    .venv/bin/python benchmarks/qnn_plain.py FOLDER TASK SCHEME [--seq 16] [--samples 8] [--judge 3] [--deployc PTE]

TASK is the transformers task of FOLDER's model, or `pytorchcv:<module>:<function>` for a pytorchcv row of
the zoo (FOLDER holds its model.safetensors).

What a user writes from Qualcomm's own examples (executorch/examples/qualcomm/oss_scripts/): the model
from transformers, torch.export, for a quantized scheme `QnnQuantizer` with Qualcomm's defaults
(set_default_quant_config(QuantDtype), nothing else), prepare_pt2e / convert_pt2e on `--samples` random
samples, `to_edge_transform_and_lower_to_qnn` for SM8650 (fp16: `use_fp16=True`), run through
ExecuTorch's runtime on the HTP emulator of the QNN host libraries, compared with eager fp32 on `--judge`
other random samples (3 unless told; the worst one judged). Only the host libraries come from deployc
(qnn_host: which libQnnHtp.so, and its compatibility layer); the model wrapper is deployc's, so both
paths compile the same module.
Prints one JSON line: {"status": "passed"|"missed"|"failed", "step", "error", "min_cosine", "min_sqnr_db"}.
`--deployc PTE` also runs deployc's program of the same row on the same samples and adds its
"deployc_min_cosine" / "deployc_min_sqnr_db" (or "deployc_error"): the two paths compared on one input set
(each build verifies on its own seeded inputs, and a gap of a few tenths of a dB can be the inputs alone).
The caller runs it in a subprocess: a crash of the emulator ends only this process.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import traceback
from pathlib import Path
from typing import Any

QUANT_DTYPES = {"w8a8": "use_8a8w", "16a8w": "use_16a8w", "16a4w": "use_16a4w"}
TOLERANCE = {"fp16": (0.999, 35.0), "w8a8": (0.99, 20.0), "16a8w": (0.99, 20.0), "16a4w": (0.98, 12.0)}


def _inputs(model: Any, task: str, seq: int, seed: int) -> tuple[Any, ...]:
    import torch

    g = torch.Generator().manual_seed(seed)
    if task.startswith("pytorchcv:"):  # hf_zoo.PYTORCHCV: a 224 x 224 image
        return (torch.rand(1, 3, 224, 224, generator=g) * 2 - 1,)
    config = model.model.config
    if task in ("embedding", "text-classification"):
        ids = torch.randint(0, int(config.vocab_size), (1, seq), generator=g)
        return ids, torch.ones(1, seq, dtype=torch.long)
    if task == "audio-embedding":  # Whisper-style: log-mel features, 30 s of them
        frames = 2 * int(config.max_source_positions)
        return (torch.rand(1, int(config.num_mel_bins), frames, generator=g) * 2 - 1,)
    config = getattr(config, "backbone_config", None) or config  # Depth Anything: its backbone's size
    size = getattr(config, "image_size", 224)  # what deployc derives when the config has no size (CvT)
    size = size[0] if isinstance(size, list) else int(size)
    return (torch.rand(1, int(getattr(config, "num_channels", 3)), size, size, generator=g) * 2 - 1,)


def _load(folder: Path, task: str) -> Any:
    """deployc's wrapper of a transformers directory, or (task "pytorchcv:<module>:<function>") the
    pytorchcv model with the zoo's weights."""
    from deployc.graph.hf_model import load_directory

    if not task.startswith("pytorchcv:"):
        return load_directory(folder, task)
    import cv_models
    from safetensors.torch import load_file

    model = cv_models.build(task.removeprefix("pytorchcv:"))
    model.load_state_dict(load_file(folder / "model.safetensors"))
    return model


def run(folder: Path, task: str, scheme: str, seq: int, samples: int, deployc: Path | None = None,
        judge: int = 3) -> dict[str, Any]:
    import torch

    from deployc.targets.backends.qnn import host as qnn_host

    qnn_host.activate()
    from executorch.backends.qualcomm.serialization.qc_schema import QcomChipset
    from executorch.backends.qualcomm.utils.utils import (
        generate_htp_compiler_spec,
        generate_qnn_executorch_compiler_spec,
        to_edge_transform_and_lower_to_qnn,
    )
    from executorch.runtime import Runtime

    step = "load"
    try:
        model = _load(folder, task)
        example = _inputs(model, task, seq, 0)
        module: Any = model
        if scheme != "fp16":
            step = "quantize"
            from executorch.backends.qualcomm.quantizer.quantizer import QnnQuantizer, QuantDtype
            from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

            quantizer = QnnQuantizer()
            quantizer.set_default_quant_config(getattr(QuantDtype, QUANT_DTYPES[scheme]))
            prepared = prepare_pt2e(torch.export.export(model, example, strict=False).module(), quantizer)
            for i in range(samples):
                prepared(*_inputs(model, task, seq, 100 + i))
            module = convert_pt2e(prepared)
        step = "lower"
        specs = generate_qnn_executorch_compiler_spec(
            soc_model=QcomChipset.SM8650, backend_options=generate_htp_compiler_spec(use_fp16=scheme == "fp16"))
        program = to_edge_transform_and_lower_to_qnn(module, example, specs).to_executorch()
        step = "run"
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "model.pte"
            path.write_bytes(program.buffer)
            cosines, sqnrs = _judge(Runtime.get().load_program(path).load_method("forward"), model, task, seq, judge)
    except Exception as exc:  # a failed step is the result being measured
        return {"status": "failed", "step": step, "error": _last_line(exc)}
    min_cos, min_sqnr = TOLERANCE[scheme]
    ok = min(cosines) >= min_cos and min(sqnrs) >= min_sqnr
    result = {"status": "passed" if ok else "missed", "min_cosine": min(cosines), "min_sqnr_db": min(sqnrs)}
    if deployc is not None:
        try:
            theirs = _judge(Runtime.get().load_program(deployc).load_method("forward"), model, task, seq, judge)
            result |= {"deployc_min_cosine": min(theirs[0]), "deployc_min_sqnr_db": min(theirs[1])}
        except Exception as exc:  # e.g. deployc's program takes other inputs: said, not compared
            result["deployc_error"] = _last_line(exc)
    return result


def _judge(method: Any, model: Any, task: str, seq: int, n: int) -> tuple[list[float], list[float]]:
    """Cosines and SQNRs of a program's first output against eager fp32 on the n judging samples."""
    import torch

    from deployc.graph.metrics import compare

    cosines, sqnrs = [], []
    for i in range(n):
        x = _inputs(model, task, seq, 1000 + i)
        with torch.no_grad():
            ref = model(*x)
        m = compare(ref.numpy(), method.execute(list(x))[0].numpy())
        cosines.append(m.cosine)
        sqnrs.append(m.sqnr_db)
    return cosines, sqnrs


def _last_line(exc: BaseException) -> str:
    return traceback.format_exception_only(type(exc), exc)[-1].strip()[:300]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("folder", type=Path)
    parser.add_argument("task")
    parser.add_argument("scheme", choices=sorted(TOLERANCE))
    parser.add_argument("--seq", type=int, default=16)
    parser.add_argument("--samples", type=int, default=8)
    parser.add_argument("--judge", type=int, default=3, help="how many random samples both programs are judged on")
    parser.add_argument("--deployc", type=Path, help="deployc's program of this row, judged on the same samples")
    args = parser.parse_args()
    result = run(args.folder, args.task, args.scheme, args.seq, args.samples, args.deployc, args.judge)
    sys.stdout.flush()
    print("RESULT " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
