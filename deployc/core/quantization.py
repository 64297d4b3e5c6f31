"""The quantization vocabulary and the recipe record: one table that the schema, the planner and the
docs read. Pure data; no torch. Each backend module says which schemes it builds and how."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field, model_validator

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
        # A GGUF file's own blocks kept (graph/gguf_blocks.py): its error is the activations', held to 8-bit's.
        Scheme("gguf", 4, False, False, 0.99, 20.0, 1.03, 0.02, 0.93),
        # The same blocks, activations int8 per token without their residual: twice gguf's decode speed, half
        # its lowering, and per-token int8's error (SmolLM2: KL 0.035, top-1 91%), held to static int8's.
        Scheme("gguf-8da", 4, False, False, 0.98, 12.0, 1.05, 0.05, 0.85),
    )
}

# Schemes that keep a GGUF file's blocks (or round a float checkpoint to them): the `blocks` method.
GGUF_SCHEMES = frozenset({"gguf", "gguf-8da"})

SchemeName = Literal["fp32", "fp16", "8w", "4w", "8da8w", "8da4w", "w8a8", "16a8w", "16a4w", "gguf", "gguf-8da"]

DEFAULT_GROUP_SIZE = 32
DEFAULT_CALIBRATION_SAMPLES = 8
# A static scheme may leave this share of its quantized operators float to meet its tolerance: enough for the
# transformers whose error sits in a few values (CvT: 5 of 209), not for conv nets whose error is spread
# over most layers (MobileNetV2 needs ~90% of them float: no longer an int8 program).
# docs/manifest.md, "Static int8's float fallback".
DEFAULT_FLOAT_FALLBACK = 0.25

# How a scheme is applied: not at all, torchao's quantize_ before export, PT2E around export, by the
# backend's own converter (LiteRT's quantization recipes), or a GGUF file's blocks kept before export.
Method = Literal["none", "torchao", "pt2e", "converter", "blocks"]


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
    calibration_text: str | None = None  # a decoder's, relative to the manifest; None: deployc's sample
    float_fallback: float | None = None  # the share of quantized operators the build may leave float; None: none
    # Static activation ranges widened beyond the calibrated ones where the backend does so (QNN's 16-bit
    # activations: twice theirs), against inputs beyond random calibration samples; not for a decoder calibrated
    # on text, whose residual stream's range (SmolLM2: -850..24,900) leaves each bit precious.
    widen_ranges: bool = True


# The manifest's `quantization:` field (a model's, or an override's): read by the schema, the planner
# and every backend.
def _scheme_shorthand(v: Any) -> Any:
    if v == "auto":
        return {"choose": "auto"}
    return {"scheme": v} if isinstance(v, str) else v


class Calibration(Frozen):
    samples: Annotated[int, Field(ge=1, le=10_000)] = Field(
        default=DEFAULT_CALIBRATION_SAMPLES, description="random samples within the inputs' ranges")
    seed: int = 0
    dataset: str | None = Field(default=None, description="instead of random samples: a torch.save'd list of "
                                                          "samples (each a list of tensors in input order), "
                                                          "relative to the manifest")
    text: str | None = Field(default=None, description="text-generation models: a UTF-8 text file, relative to the "
                                                       "manifest, whose tokens the quantizer observes: `samples` "
                                                       "stretches of it read as the app reads a prompt (default: "
                                                       "deployc's calibration sample); never the text the program "
                                                       "is judged on (verify.text)")

    @model_validator(mode="after")
    def _one_source(self) -> Calibration:
        if self.text is not None and self.dataset is not None:
            raise ValueError("give `text` (a decoder's calibration text) or `dataset` (tensors), not both")
        return self


Objective = Literal["size", "latency"]


class QuantSpec(Frozen):
    """One scheme (`scheme`), or several for the build to choose from by measurement (`choose`)."""

    scheme: SchemeName | None = Field(default=None, description="the scheme (one of the named schemes)")
    choose: list[SchemeName] | Literal["auto"] | None = Field(
        default=None, min_length=1, description="instead of `scheme`: the candidates the build verifies, cheapest "
                                                "first by `by`, keeping the first that meets every tolerance; "
                                                "auto: every scheme the unit accepts (`quantization: auto` for short)")
    by: Objective = Field(default="size", description="with `choose`: size (smallest weights first, stop at the "
                                                      "first that passes) or latency (verify every candidate, keep "
                                                      "the fastest that passes, measured on this host)")
    group_size: Annotated[int, Field(ge=1)] | None = Field(
        default=None, description="weights per quantization group (4w, 8da4w, 16a4w); default 32")
    calibration: Calibration | None = Field(
        default=None, description="calibration inputs for static schemes (w8a8, 16a8w, 16a4w)")
    embeddings: bool = Field(
        default=True, description="quantize embedding tables too, where the backend has quantized embedding "
                                  "kernels (XNNPACK 8da8w: int8 per row; 8da4w: int4 in groups); false keeps "
                                  "them float")
    float_fallback: Annotated[float, Field(ge=0.0, le=1.0)] = Field(
        default=DEFAULT_FLOAT_FALLBACK,
        description="static schemes on a unit that runs float operators beside int8 ones (XNNPACK w8a8): when the "
                    "calibrated model misses the verification tolerance, the largest share of its quantized "
                    "operators the build may leave float, the most sensitive first (docs/manifest.md, "
                    "float_fallback); 0 keeps every operator int8")


    @model_validator(mode="after")
    def _one_of(self) -> QuantSpec:
        if (self.scheme is None) == (self.choose is None):
            raise ValueError("give either `scheme` (one scheme) or `choose` (candidates: a list of schemes, or auto)")
        if isinstance(self.choose, list) and len(set(self.choose)) != len(self.choose):
            raise ValueError("`choose` names a scheme twice")
        if self.scheme is not None and "by" in self.model_fields_set:
            raise ValueError("`by` applies to `choose`, not to a single `scheme`")
        return self

    @property
    def fixed(self) -> SchemeName:
        """The scheme of a resolved (single-scheme) spec: the planner expands `choose` before this is read."""
        if self.scheme is None:
            raise ValueError("a choice of schemes has no single scheme")
        return self.scheme

    def candidates(self, accepted: Sequence[SchemeName]) -> list[SchemeName]:
        """The schemes to try on a unit accepting `accepted`, in the manifest's (or, auto, the unit's) order."""
        if self.scheme is not None:
            return [self.scheme]
        return list(accepted) if self.choose == "auto" else list(self.choose or [])

    def as_scheme(self, scheme: SchemeName) -> QuantSpec:
        """This choice's options applied to one candidate (options a scheme does not take are dropped)."""
        s = SCHEMES[scheme]
        return QuantSpec(scheme=scheme, group_size=self.group_size if s.grouped else None,
                         calibration=self.calibration if s.calibrated else None, embeddings=self.embeddings,
                         float_fallback=self.float_fallback)


Quantization = Annotated[QuantSpec, BeforeValidator(_scheme_shorthand)]
