"""The quantization vocabulary: one table that the schema, the planner and the docs read.

Pure data; no torch. Backends declare which of these names they can build (deployc.targets.backends).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True)
class Scheme:
    name: str
    summary: str
    weight_bits: int
    activation_bits: int
    grouped: bool  # takes `group_size`
    calibrated: bool  # needs calibration samples (static activation ranges)
    min_cosine: float  # default verification tolerances against fp32 eager
    min_sqnr_db: float


SCHEMES: dict[str, Scheme] = {
    s.name: s
    for s in (
        Scheme("fp32", "float32, no quantization", 32, 32, False, False, 0.9999, 60.0),
        Scheme("fp16", "float16 weights and activations", 16, 16, False, False, 0.999, 35.0),
        Scheme("8w", "int8 weight-only (per channel), float activations", 8, 32, False, False, 0.995, 25.0),
        Scheme("4w", "int4 weight-only, grouped", 4, 32, True, False, 0.98, 12.0),
        Scheme("8da8w", "int8 dynamic activations, int8 per-channel weights", 8, 8, False, False, 0.99, 20.0),
        Scheme("8da4w", "int8 dynamic activations, int4 grouped weights", 4, 8, True, False, 0.98, 12.0),
        Scheme("w8a8", "static int8 activations and weights, calibrated", 8, 8, False, True, 0.99, 20.0),
        Scheme("16a8w", "int16 activations, int8 weights (QNN)", 8, 16, False, True, 0.99, 20.0),
        Scheme("16a4w", "int16 activations, int4 weights (QNN)", 4, 16, True, True, 0.98, 12.0),
    )
}

SchemeName = Literal["fp32", "fp16", "8w", "4w", "8da8w", "8da4w", "w8a8", "16a8w", "16a4w"]

DEFAULT_GROUP_SIZE = 32
DEFAULT_CALIBRATION_SAMPLES = 8
