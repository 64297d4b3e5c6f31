"""Per backend, how each quantization scheme is realised: the concrete recipe the build runs.

Pure data. deployc.graph.quantize turns a recipe into torchao configs or PT2E quantizers.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

from deployc.manifest import QuantSpec
from deployc.quantization import DEFAULT_CALIBRATION_SAMPLES, DEFAULT_GROUP_SIZE, SCHEMES

Method = Literal["none", "torchao", "pt2e"]


class Recipe(BaseModel):
    model_config = ConfigDict(frozen=True)
    scheme: str
    method: Method
    config: str  # the torchao config or PT2E quantizer, as the build constructs it
    group_size: int | None = None
    calibration_samples: int | None = None
    calibration_seed: int | None = None
    calibration_dataset: str | None = None  # relative to the manifest
    calibration_dataset_sha256: str | None = None


_TABLE: dict[tuple[str, str], tuple[Method, str]] = {
    ("xnnpack", "fp32"): ("none", "-"),
    ("xnnpack", "8da8w"): ("torchao", "Int8DynamicActivationIntxWeightConfig(weight_dtype=int8, granularity=PerAxis(0))"),
    ("xnnpack", "8da4w"): ("torchao", "Int8DynamicActivationIntxWeightConfig(weight_dtype=int4, granularity=PerGroup)"),
    ("xnnpack", "w8a8"): ("pt2e", "XNNPACKQuantizer(symmetric, per_channel, static)"),
    ("portable", "fp32"): ("none", "-"),
    ("vulkan", "fp32"): ("none", "-"),
    ("vulkan", "fp16"): ("none", "VulkanPartitioner(force_fp16=True)"),
    ("cortex_m", "w8a8"): ("pt2e", "CortexMQuantizer(static int8)"),
    ("qnn", "w8a8"): ("pt2e", "QnnQuantizer(use_8a8w)"),
    ("qnn", "16a8w"): ("pt2e", "QnnQuantizer(use_16a8w)"),
    ("qnn", "16a4w"): ("pt2e", "QnnQuantizer(use_16a4w)"),
    ("qnn", "fp16"): ("none", "HtpCompilerSpec(use_fp16=True)"),
}


def recipe_for(backend: str, quant: QuantSpec) -> Recipe | None:
    """None when the backend cannot build this scheme."""
    entry = _TABLE.get((backend, quant.scheme))
    if entry is None:
        return None
    method, config = entry
    scheme = SCHEMES[quant.scheme]
    cal = quant.calibration
    return Recipe(
        scheme=quant.scheme, method=method, config=config,
        group_size=(quant.group_size or DEFAULT_GROUP_SIZE) if scheme.grouped else None,
        calibration_samples=(cal.samples if cal else DEFAULT_CALIBRATION_SAMPLES) if scheme.calibrated else None,
        calibration_seed=(cal.seed if cal else 0) if scheme.calibrated else None,
        calibration_dataset=cal.dataset if cal and scheme.calibrated else None,
    )


def supported(backend: str) -> set[str]:
    return {s for (b, s) in _TABLE if b == backend}
