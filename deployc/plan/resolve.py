"""Manifest x profiles -> one resolved spec per (model, target): overrides and defaults applied. Pure."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from deployc.core.errors import Location
from deployc.core.quantization import GGUF_SCHEMES, SCHEMES, QuantSpec, SchemeName
from deployc.load.manifest import DimSpec, ModelSpec, NpuDecoding, VerifySpec
from deployc.load.project import Project
from deployc.targets.profile import LoadedProfile

DEFAULT_FLOAT_RANGE = (-1.0, 1.0)
DEFAULT_INT_RANGE = (0.0, 100.0)


@dataclass(frozen=True)
class Tolerances:
    min_cosine: float
    min_sqnr_db: float
    max_abs: float | None
    tokens: int | None
    enabled: bool
    max_perplexity_ratio: float
    max_kl: float
    min_top1: float
    text: str | None  # the held-out text, relative to the manifest
    allow_float_ops: bool = False
    data: str | None = None  # task-measure samples (.npz), relative to the manifest
    min_topk_overlap: float | None = None
    topk: int = 5
    inputs: int | None = None  # seeded inputs at each verification size (None: the planner's default)
    seconds: float | None = None  # a static decoder's verification on an emulator, estimated (None: the default)
    explicit: frozenset[str] = frozenset()  # the fields the manifest sets (the rest are the scheme's defaults)


@dataclass(frozen=True)
class ResolvedModel:
    model: str
    target: str  # the manifest's reference to the profile
    profile: LoadedProfile
    spec: ModelSpec
    quantization: QuantSpec
    quantization_at: Location  # where the effective scheme was written
    quantization_field: str
    unit: str | None  # pinned compute unit
    unit_at: Location | None
    tolerances: Tolerances
    dims: dict[str, DimSpec]  # the model's dims with this target's overrides applied
    architecture: str | None = None  # a Hugging Face source's model_type
    npu: NpuDecoding | None = None  # a decoder's static form on an NPU unit (this target's, else the model's)
    npu_at: Location | None = None
    # With a target override's scheme: the same model in its own scheme, for fallback units that do not take
    # the override's (an NPU's 16a8w falls back to a CPU in the model's 8da4w).
    own_scheme: ResolvedModel | None = None
    verify_layers: tuple[VerifySpec | None, ...] = ()  # the model's verify, then this target's
    choice: QuantSpec | None = None  # a candidate of a choice of schemes: the manifest's choice

    def with_scheme(self, scheme: SchemeName) -> ResolvedModel:
        """One candidate of a choice of schemes (`quantization.choose`): that scheme, its tolerances."""
        return dataclasses.replace(self, quantization=self.quantization.as_scheme(scheme), choice=self.quantization,
                                   tolerances=_tolerances(_defaults(scheme, self.spec), *self.verify_layers))

    @property
    def dynamic_dims(self) -> list[str]:
        return sorted(n for n, d in self.dims.items() if d.bounds()[1] > d.bounds()[0])


def _defaults(scheme: str | None, spec: ModelSpec) -> str | None:
    """Whose default tolerances a scheme takes: gguf (and gguf-8da) on a float checkpoint rounds its weights to
    4-bit blocks (a GGUF file's are kept, the activations' error alone is left), so it is held to 8da4w's."""
    return "8da4w" if scheme in GGUF_SCHEMES and spec.source.gguf is None else scheme


def _tolerances(scheme: str | None, *layers: VerifySpec | None) -> Tolerances:
    """The scheme's defaults, then each layer's fields that the manifest sets (the target's last)."""
    s = SCHEMES[scheme or "fp32"]  # a choice: each candidate gets its own (ResolvedModel.with_scheme)
    t = Tolerances(min_cosine=s.min_cosine, min_sqnr_db=s.min_sqnr_db, max_abs=None, tokens=None, enabled=True,
                   max_perplexity_ratio=s.max_perplexity_ratio, max_kl=s.max_kl, min_top1=s.min_top1, text=None)
    for layer in layers:
        if layer is not None:
            t = dataclasses.replace(t, **{k: getattr(layer, k) for k in layer.model_fields_set},
                                    explicit=t.explicit | layer.model_fields_set)
    return t


def resolve(project: Project) -> list[ResolvedModel]:
    out: list[ResolvedModel] = []
    doc = project.doc
    for target in project.manifest.targets:
        for name, spec in project.manifest.models.items():
            ov = spec.overrides.get(target)
            base = ("models", name)
            q_path: tuple[str, ...]
            if ov is not None and ov.quantization is not None:
                quant = ov.quantization
                q_path = (*base, "overrides", target, "quantization")
            else:
                quant = spec.quantization
                q_path = (*base, "quantization")
            npu_path = (*base, "overrides", target, "npu") if ov is not None and ov.npu is not None else (*base, "npu")
            npu = ov.npu if ov is not None and ov.npu is not None else spec.npu
            unit = ov.unit if ov else None
            unit_at = doc.locate((*base, "overrides", target, "unit")) if unit else None
            resolved = ResolvedModel(
                model=name, target=target, profile=project.profiles[target], spec=spec,
                quantization=quant, quantization_at=doc.locate(q_path),
                quantization_field=".".join(str(p) for p in q_path),
                unit=unit, unit_at=unit_at,
                tolerances=_tolerances(_defaults(quant.scheme, spec), spec.verify, ov.verify if ov else None),
                verify_layers=(spec.verify, ov.verify if ov else None),
                dims={**spec.dims, **{n: d.under(spec.dims[n]) if n in spec.dims else d
                                     for n, d in (ov.dims if ov else {}).items()}},
                architecture=project.architectures.get(name),
                npu=npu, npu_at=doc.locate(npu_path) if npu is not None else None)
            if (quant.scheme, quant.choose) != (spec.quantization.scheme, spec.quantization.choose):
                resolved = dataclasses.replace(resolved, own_scheme=dataclasses.replace(
                    resolved, quantization=spec.quantization, quantization_at=doc.locate((*base, "quantization")),
                    quantization_field=f"models.{name}.quantization",
                    tolerances=_tolerances(_defaults(spec.quantization.scheme, spec), spec.verify,
                                           ov.verify if ov else None)))
            out.append(resolved)
    return out
