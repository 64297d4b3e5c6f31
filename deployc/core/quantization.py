"""The quantization vocabulary and the recipe record: one table that the schema, the planner and the
docs read. Pure data; no torch. Each backend module says which schemes it builds and how."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from deployc.core.records import Frozen


@dataclass(frozen=True)
class Scheme:
    name: str
    weight_bits: int
    grouped: bool  # takes `group_size`
    calibrated: bool  # needs calibration samples (static activation ranges)
    min_cosine: float  # default verification tolerances against fp32 eager
    min_sqnr_db: float
    # Text-generation programs on held-out text (docs/manifest.md, "Verifying a decoder"): perplexity
    # over eager fp32's, mean KL divergence from eager's next-token distribution, top-1 agreement.
    max_perplexity_ratio: float
    max_kl: float
    min_top1: float


SCHEMES: dict[str, Scheme] = {
    s.name: s
    for s in (
        Scheme("fp32", 32, False, False, 0.9999, 60.0, 1.001, 0.001, 0.99),
        Scheme("fp16", 16, False, False, 0.999, 35.0, 1.01, 0.005, 0.97),
        Scheme("8w", 8, False, False, 0.995, 25.0, 1.03, 0.02, 0.93),
        Scheme("4w", 4, True, False, 0.98, 12.0, 1.10, 0.08, 0.80),
        Scheme("8da8w", 8, False, False, 0.99, 20.0, 1.03, 0.02, 0.93),
        Scheme("8da4w", 4, True, False, 0.98, 12.0, 1.10, 0.08, 0.80),
        Scheme("w8a8", 8, False, True, 0.99, 20.0, 1.05, 0.05, 0.85),
        Scheme("16a8w", 8, False, True, 0.99, 20.0, 1.03, 0.02, 0.93),
        Scheme("16a4w", 4, True, True, 0.98, 12.0, 1.10, 0.08, 0.80),
    )
}

SchemeName = Literal["fp32", "fp16", "8w", "4w", "8da8w", "8da4w", "w8a8", "16a8w", "16a4w"]

DEFAULT_GROUP_SIZE = 32
DEFAULT_CALIBRATION_SAMPLES = 8
# A static scheme may leave this share of its quantized operators float to meet its tolerance: enough for the
# transformers whose error sits in a few values (CvT: 5 of 209), not for conv nets whose error is spread
# over most layers (MobileNetV2 needs ~90% of them float: no longer an int8 program).
# docs/manifest.md, "Static int8's float fallback".
DEFAULT_FLOAT_FALLBACK = 0.25

# How a scheme is applied: not at all, torchao's quantize_ before export, PT2E around export, or by the
# backend's own converter (LiteRT's quantization recipes).
Method = Literal["none", "torchao", "pt2e", "converter"]


class Recipe(Frozen):
    """What the build does to quantize one model for one backend; the backend module turns it into
    the real torchao config or PT2E quantizer (and describes it in the same place)."""

    scheme: SchemeName
    method: Method
    group_size: int | None = None
    embedding_bits: int | None = None  # embedding tables quantized to this many bits (weight-only); None: float
    calibration_samples: int | None = None
    calibration_seed: int | None = None
    calibration_dataset: str | None = None  # relative to the manifest
    calibration_dataset_sha256: str | None = None
    float_fallback: float | None = None  # the share of quantized operators the build may leave float; None: none
