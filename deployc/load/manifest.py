"""The manifest schema (apiVersion: API_VERSION) and its loader.

Structure is checked by pydantic; cross-references (dims, targets, overrides) by `check_references`,
so that a user sees every problem at once, each pointing at its own line.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Annotated, Any, Literal, Protocol

from pydantic import Field, ValidationError, field_validator

from deployc.core.diagnostics import closest, diagnostics_from
from deployc.core.errors import Diagnostic, ManifestError
from deployc.core.quantization import SCHEMES, Quantization, QuantSpec
from deployc.core.records import ApiVersion, Frozen, GgufRef, Identifier
from deployc.core.yaml_io import Document
from deployc.pipeline.schema import Pipeline

Dtype = Literal["float32", "float16", "bfloat16", "int64", "int32", "int16", "int8", "uint8", "bool"]

_SEMVER = re.compile(
    r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)"
    r"(?:-((?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*)(?:\.(?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*))*))?"
    r"(?:\+([0-9a-zA-Z-]+(?:\.[0-9a-zA-Z-]+)*))?$"
)
_FACTORY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*:[A-Za-z_][A-Za-z0-9_]*$")


class Checkpoint(Frozen):
    path: str = Field(description="weights file, relative to the manifest's folder")
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$", description="lowercase hex sha256 of the file; checked before use")


class Source(Frozen):
    """Where the model comes from: a Python factory, a Hugging Face model directory, or a GGUF file (one of
    them)."""

    factory: str | None = Field(default=None, description="'module:callable' returning a torch.nn.Module; module "
                                                           "looked up in the manifest's folder first, then on the "
                                                           "Python path")
    huggingface: str | None = Field(default=None, description="a Hugging Face model directory (config.json, "
                                                              "*.safetensors), relative to the manifest; the "
                                                              "model's `task` picks the model class")
    gguf: GgufRef | None = Field(default=None, description="a GGUF file (llama.cpp's format; a Llama): a path "
                                                           "relative to the manifest, or {package, file} for a "
                                                           "file inside an installed package. Its metadata gives "
                                                           "the config, tokenizer and chat template; its weights "
                                                           "are read as llama.cpp dequantizes them")
    kwargs: dict[str, Any] = Field(default_factory=dict, description="keyword arguments for the factory")
    checkpoint: Checkpoint | None = Field(default=None, description="weights loaded over the model's: a "
                                                                    "torch.save'd state dict or a .safetensors file")
    trust_remote_code: bool = Field(default=False, description="always refused: deployc never runs code from a "
                                                               "model directory")

    @field_validator("factory")
    @classmethod
    def _factory_form(cls, v: str | None) -> str | None:
        if v is not None and not _FACTORY.match(v):
            raise ValueError(f"{v!r} is not of the form 'package.module:callable'")
        return v


class InputSpec(Frozen):
    shape: list[Annotated[int, Field(ge=1)] | Identifier] = Field(
        description="sizes: positive integers, or names of dims declared under `dims`")
    dtype: Dtype = "float32"
    range: tuple[float, float] | None = Field(
        default=None, description="[low, high] of generated example and calibration values "
                                  "(integers: both inclusive)")
    fill: Literal["random", "arange"] = Field(
        default="random", description="random values within `range`, or 0, 1, 2, ... along the last dim "
                                      "(positions, e.g. an LLM's input_pos)")

    @field_validator("range")
    @classmethod
    def _ordered(cls, v: tuple[float, float] | None) -> tuple[float, float] | None:
        if v is not None and v[0] > v[1]:
            raise ValueError(f"range low {v[0]} is greater than high {v[1]}")
        return v


class DimSpec(Frozen):
    min: Annotated[int, Field(ge=1)] = 1
    max: Annotated[int, Field(ge=1)]
    multiple_of: Annotated[int, Field(ge=2)] | None = Field(
        default=None, description="the dim takes only multiples of this within [min, max] (a model that splits "
                                  "it into blocks); exported as multiple_of * a smaller dim")

    def bounds(self) -> tuple[int, int]:
        """The smallest and largest size the dim takes: min and max, rounded inwards to multiples."""
        k = self.multiple_of or 1
        return -(-self.min // k) * k, self.max // k * k

    def under(self, model_dim: DimSpec) -> DimSpec:
        """This override of `model_dim`: a constraint of the model's (multiple_of) holds unless restated."""
        if self.multiple_of is not None or model_dim.multiple_of is None:
            return self
        return self.model_copy(update={"multiple_of": model_dim.multiple_of})


# Greedy tokens generated from each prompt when a text-generation program is verified.
GENERATION_TOKENS = 32
# Seeded inputs a program is verified on, at least, over its sizes (a tiny model's error can move by 15 dB
# from one random input to the next: one draw is not a verdict), and at most at each size.
MIN_VERIFY_INPUTS, MAX_VERIFY_INPUTS = 3, 32


class VerifySpec(Frozen):
    min_cosine: Annotated[float, Field(ge=-1.0, le=1.0)] | None = None
    min_sqnr_db: float | None = None
    max_abs: Annotated[float, Field(ge=0.0)] | None = None
    inputs: Annotated[int, Field(ge=1, le=MAX_VERIFY_INPUTS)] | None = Field(
        default=None, description="seeded random inputs the program is run on at each verification size, the worst "
                                  f"judged (1-{MAX_VERIFY_INPUTS}; default: at least {MIN_VERIFY_INPUTS} in all, so "
                                  f"{MIN_VERIFY_INPUTS} at the one size of a static-shape model, one at each of the "
                                  "three sizes of a dynamic one; a decoder judged on held-out text: one)")
    tokens: Annotated[int, Field(ge=0, le=GENERATION_TOKENS)] | None = Field(
        default=None, description="text-generation models: how many leading greedy tokens must equal eager "
                                  f"PyTorch's on every prompt (0-{GENERATION_TOKENS}; {GENERATION_TOKENS} are "
                                  "always measured and reported; default 0 requires none)")
    text: str | None = Field(default=None, description="text-generation models: a UTF-8 text file, relative to the "
                                                       "manifest, held out from training, that the program's "
                                                       "perplexity, KL and top-1 agreement are measured on "
                                                       "(default: deployc's own sample)")
    max_perplexity_ratio: Annotated[float, Field(ge=1.0)] | None = Field(
        default=None, description="text-generation models: the program's perplexity on the held-out text over eager "
                                  "fp32's, at most (default per scheme)")
    max_kl: Annotated[float, Field(ge=0.0)] | None = Field(
        default=None, description="text-generation models: mean KL divergence (nats) of the program's next-token "
                                  "distribution from eager fp32's, at most (default per scheme)")
    min_top1: Annotated[float, Field(ge=0.0, le=1.0)] | None = Field(
        default=None, description="text-generation models: share of positions where the program's most likely next "
                                  "token is eager fp32's; classifiers with `data`: share of samples whose top class "
                                  "is eager fp32's; at least (default per scheme)")
    data: str | None = Field(default=None, description="an .npz file, relative to the manifest, with one array per "
                             "model input named after it, samples along the first axis: the task measures "
                             "(min_top1 for classifiers, min_topk_overlap for embedders) are computed on it")
    min_topk_overlap: Annotated[float, Field(ge=0.0, le=1.0)] | None = Field(
        default=None, description="embedding models with `data`: mean share of each sample's `topk` nearest "
                                  "neighbours among the other samples that the program finds as eager fp32 does, at "
                                  "least (default: the scheme's min_top1)")
    topk: Annotated[int, Field(ge=1, le=100)] = Field(default=5, description="neighbours compared per sample")
    seconds: Annotated[float, Field(gt=0)] | None = Field(
        default=None, description="a decoder in the static form verified on an emulator (QNN's HTP, seconds a "
                                  "call): the seconds its verification may take by the plan's estimate; the plan "
                                  "judges fewer greedy prompts (at least 1) to fit, and says so; a decoder's arm64 "
                                  "check under qemu: the seconds it may take, the verification points that fit run, "
                                  "smallest first (default 300)")
    allow_float_ops: bool = Field(default=False, description="on a unit whose profile says int8_only: accept a "
                                  "program with operators left outside the unit's int8 kernels (float or portable "
                                  "compute); by default such a program fails, naming them")
    enabled: bool = True


class NpuDecoding(Frozen):
    """A text-generation model on an NPU unit is built in the static form NPUs take: the KV caches are
    the program's inputs and outputs, a prefill method takes `prefill` tokens a call and a decode method
    one (docs/qnn.md, "Decoders on the NPU")."""

    prefill: Annotated[int, Field(ge=1)] = Field(description="tokens per prefill call: a longer prompt goes in "
                                                             "several, a shorter one is padded")
    context: Annotated[int, Field(ge=2)] = Field(description="positions the KV caches hold (prompt and answer), at "
                                                             "most the model's constants.max_seq_len")
    decode: Literal["own", "prefill"] = Field(
        default="own", description="own: a decode method of one token a call (its own graph, the weights stored again: "
                                   "the HTP emulator cannot share them); prefill: each new token through the prefill "
                                   "method, padded to its chunk (one graph, the weights once)")
    prefix: Literal["bos", "none"] | None = Field(
        default=None, description="bos: position 0, the model's bos token that starts every prompt, computed in "
                                  "float at build time and stored in the program, so every call starts at position 1 "
                                  "(the default where the model has a bos token; its first position carries "
                                  "activations far larger than any other's); none: position 0 through the program "
                                  "like the rest")


class Override(Frozen):
    """What a target may change about a model."""

    quantization: Quantization | None = None
    unit: Identifier | None = Field(default=None, description="pin the model to this compute unit")
    verify: VerifySpec | None = None
    dims: dict[Identifier, DimSpec] = Field(
        default_factory=dict, description="this target's range for some of the model's dims; min = max makes "
                                          "the dim static (NPUs need static shapes)")
    npu: NpuDecoding | None = Field(default=None, description="this target's static form of a text-generation "
                                                           "model on an NPU unit")


class OutputSpec(Frozen):
    shape: list[Annotated[int, Field(ge=1)] | Identifier]
    dtype: Dtype = "float32"


Constant = int | float | bool | list[int] | list[float]


class MethodSpec(Frozen):
    """A further method of the same program (e.g. encode_image beside forward), sharing weights and dims."""

    function: Identifier | None = Field(default=None, description="the model's method to export; default: "
                                                                    "the method's own name")
    inputs: dict[Identifier, InputSpec] = Field(min_length=1)
    outputs: dict[Identifier, OutputSpec] = Field(default_factory=dict)


# Which task measure `verify.data` gets (docs/manifest.md, "Task measures"): a classifier's top class
# agreement with eager, or an embedder's nearest neighbours among the samples.
TASK_MEASURES: dict[str, str] = {
    "classification": "top1", "text-classification": "top1", "image-classification": "top1",
    "embedding": "topk", "image-embedding": "topk", "audio-embedding": "topk",
}

Task = Literal["embedding", "text-generation", "classification", "text-classification", "image-classification",
               "image-embedding", "depth-estimation", "object-detection", "audio-embedding", "other"]


class ModelSpec(Frozen):
    source: Source
    task: Task = Field(default="other", description="what the model does: pipelines check that stages use fitting "
                                                    "models, and a Hugging Face source builds the matching model "
                                                    "class and derives its inputs")
    inputs: dict[Identifier, InputSpec] = Field(
        default_factory=dict, description="named example inputs, in call order; derived from a Hugging Face "
                                          "directory's config when left out")
    outputs: dict[Identifier, OutputSpec] = Field(
        default_factory=dict, description="named outputs in return order; required for models used in a pipeline")
    dims: dict[Identifier, DimSpec] = Field(default_factory=dict, description="symbolic (dynamic) dims")
    methods: dict[Identifier, MethodSpec] = Field(
        default_factory=dict, description="further methods compiled into the same program, beside forward")
    constants: dict[Identifier, Constant] = Field(
        default_factory=dict, description="metadata compiled into the program as constant methods get_<name> "
                                          "(e.g. vocab_size, max_seq_len, eos_ids)")
    quantization: Quantization = Field(default_factory=lambda: QuantSpec(scheme="fp32"))
    verify: VerifySpec = Field(default_factory=VerifySpec)
    params: Annotated[int, Field(ge=1)] | None = Field(
        default=None, description="parameter count, for a plan-time size estimate")
    seed: int = Field(default=0, description="seed for weights' init and example inputs")
    npu: NpuDecoding | None = Field(default=None, description="text-generation models on an NPU unit (QNN): the "
                                                           "static form's prefill chunk and context")
    weights: Literal["embedded", "external"] = Field(
        default="embedded", description="embedded: weights inside the .pte; external: in a <model>.ptd data file "
        "beside it (ExecuTorch named data), stored once per bundle when programs share identical weights")
    overrides: dict[str, Override] = Field(default_factory=dict, description="per target name")


ModelName = Annotated[str, Field(pattern=r"^[a-z][a-z0-9_]*$")]


class Manifest(Frozen):
    api_version: ApiVersion = Field(alias="apiVersion")
    name: str = Field(pattern=r"^[a-z0-9]+(-[a-z0-9]+)*$", description="[a-z0-9-]+")
    version: str = Field(description="semantic version of the bundle, e.g. 1.0.0")
    description: str = ""
    targets: list[str] = Field(min_length=1, description="profile names or relative paths to profile files")
    models: dict[ModelName, ModelSpec] = Field(min_length=1)
    pipeline: Pipeline | None = Field(default=None, description="multi-model composition, see docs/pipeline.md")

    @field_validator("version", mode="before")
    @classmethod
    def _semver(cls, v: Any) -> Any:
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            raise ValueError(f"{v!r} was read as a number; quote it and use three parts, e.g. \"1.0.0\"")
        if isinstance(v, str) and not _SEMVER.match(v):
            raise ValueError(f"{v!r} is not a semantic version (MAJOR.MINOR.PATCH, e.g. 1.0.0)")
        return v


class Err(Protocol):
    def __call__(self, path: tuple[str | int, ...], msg: str, hint: str | None = None, key: bool = False) -> None: ...


def check_references(m: Manifest, doc: Document) -> list[Diagnostic]:
    """Cross-field rules pydantic cannot see: the manifest's own, then every model's (`MODEL_RULES`), each
    problem located at its own line."""
    out: list[Diagnostic] = []

    def err(path: tuple[str | int, ...], msg: str, hint: str | None = None, key: bool = False) -> None:
        out.append(Diagnostic(doc.locate(path, key=key), msg, hint))

    _targets_once(m, err)
    for name, model in m.models.items():
        for rule in MODEL_RULES:
            rule(name, model, m, err)
    return out


def _targets_once(m: Manifest, err: Err) -> None:
    seen: dict[str, int] = {}
    for i, t in enumerate(m.targets):
        if t in seen:
            err(("targets", i), f"targets[{i}]: target '{t}' is listed twice")
        seen[t] = i


def _source(name: str, model: ModelSpec, m: Manifest, err: Err) -> None:
    """One kind of source; no code from a model directory; inputs given unless a directory derives them."""
    base, src = ("models", name), model.source
    if sum(x is not None for x in (src.factory, src.huggingface, src.gguf)) != 1:
        err((*base, "source"), f"models.{name}.source: give one of `factory`, `huggingface` or `gguf`")
    if src.trust_remote_code:
        err((*base, "source", "trust_remote_code"), f"models.{name}.source.trust_remote_code: refused: deployc "
            "never runs code from a model directory", "remove it; models whose config needs custom code "
            "(auto_map) cannot be built")
    if src.factory is None and src.kwargs:
        err((*base, "source", "kwargs"), f"models.{name}.source.kwargs: a Hugging Face or GGUF source takes no "
            "kwargs (its config says how to build it)")
    if src.gguf is not None and model.task != "text-generation":
        given = "task" in model.model_fields_set
        err((*base, "task") if given else (*base, "source", "gguf"), f"models.{name}.task: a GGUF source is a "
            f"decoder: give task: text-generation (got {model.task})", key=not given)
    if not model.inputs and src.factory is not None:  # a directory that cannot be read says so itself
        err(base, f"models.{name}.inputs: required (only a Hugging Face or GGUF source can derive them)",
            "declare the inputs: inputs: {x: {shape: [1, 64]}}", key=True)


def _verify_fits_task(name: str, model: ModelSpec, m: Manifest, err: Err) -> None:
    """Neighbour overlap is for embedders; token parity and held-out text for decoders (min_top1 also for a
    classifier's agreement on verify.data), in the model's verify and in every override's."""
    base = ("models", name)
    places = [((*base, "verify"), model.verify)] + [((*base, "overrides", t, "verify"), o.verify)
                                                    for t, o in model.overrides.items()]
    measure = TASK_MEASURES.get(model.task)
    for path, v in places:
        if v is None:
            continue
        if v.min_topk_overlap is not None and measure != "topk":
            err((*path, "min_topk_overlap"), f"{'.'.join(map(str, path))}.min_topk_overlap: neighbour overlap "
                f"applies to embedding models (with verify.data); models.{name} has task {model.task}")
        for field in ("tokens", "text", "max_perplexity_ratio", "max_kl", "min_top1"):
            if field == "min_top1" and measure == "top1":  # a classifier's agreement on verify.data
                continue
            if getattr(v, field) and model.task != "text-generation":
                what = "token parity applies" if field == "tokens" else "held-out text checks apply"
                err((*path, field), f"{'.'.join(map(str, path))}.{field}: {what} to text-generation models; "
                    f"models.{name} has task {model.task}")


def _signatures(model: ModelSpec) -> list[tuple[tuple[str, ...], dict[str, InputSpec]]]:
    """Where each method's inputs are declared, and them: forward's, then the further methods'."""
    return [(("inputs",), model.inputs)] + [(("methods", meth, "inputs"), spec.inputs)
                                            for meth, spec in model.methods.items()]


def _shape_dims_declared(name: str, model: ModelSpec, m: Manifest, err: Err) -> None:
    for where, inputs in _signatures(model):
        for inp_name, inp in inputs.items():
            for j, dim in enumerate(inp.shape):
                if isinstance(dim, str) and dim not in model.dims:
                    err(("models", name, *where, inp_name, "shape", j),
                        f"models.{name}.{'.'.join(where)}.{inp_name}.shape[{j}]: dim '{dim}' is not declared under "
                        f"models.{name}.dims",
                        closest(dim, model.dims) or f"declare it: dims: {{{dim}: {{min: 1, max: 64}}}}")


def _methods(name: str, model: ModelSpec, m: Manifest, err: Err) -> None:
    """Calibrated schemes take one method; `forward` and `get_*` are not method names."""
    base = ("models", name)
    schemes = [q.scheme for q in (model.quantization, *(o.quantization for o in model.overrides.values()))
               if q is not None and q.scheme is not None]  # a choice skips calibrated candidates instead
    if model.methods and any(SCHEMES[q].calibrated for q in schemes):
        err((*base, "methods"), f"models.{name}.methods: calibrated schemes (w8a8, 16a8w, 16a4w) support "
            "only single-method programs", key=True)
    for method in model.methods:
        if method == "forward" or method.startswith("get_"):
            err((*base, "methods", method), f"models.{name}.methods.{method}: 'forward' and names starting with "
                "'get_' (constant methods) are reserved", key=True)


def _bool_ranges(name: str, model: ModelSpec, m: Manifest, err: Err) -> None:
    for inp_name, inp in model.inputs.items():
        if inp.range is not None and inp.dtype == "bool" and not (0 <= inp.range[0] <= inp.range[1] <= 1):
            err(("models", name, "inputs", inp_name, "range"),
                f"models.{name}.inputs.{inp_name}.range: bool inputs take a range within [0, 1]")


def _dims(name: str, model: ModelSpec, m: Manifest, err: Err) -> None:
    """Each declared dim takes a size, and some input uses it."""
    used = {d for _, inputs in _signatures(model) for inp in inputs.values() for d in inp.shape if isinstance(d, str)}
    for dim_name, declared in model.dims.items():
        _check_dim(declared, ("models", name, "dims", dim_name), f"models.{name}.dims.{dim_name}", err)
        if dim_name not in used:
            err(("models", name, "dims", dim_name), f"models.{name}.dims.{dim_name}: dim is declared but no input "
                "uses it", key=True)


def _quantization(name: str, model: ModelSpec, m: Manifest, err: Err) -> None:
    _check_quant(model.quantization, ("models", name, "quantization"), f"models.{name}.quantization", err,
                 model.task)


def _overrides(name: str, model: ModelSpec, m: Manifest, err: Err) -> None:
    """An override names a target of this manifest, and what it restates checks as the model's would."""
    base = ("models", name)
    for target, ov in model.overrides.items():
        if target not in m.targets:
            err((*base, "overrides", target),
                f"models.{name}.overrides.{target}: '{target}' is not one of this manifest's targets",
                closest(target, m.targets) or f"targets are: {', '.join(m.targets)}", key=True)
        if ov.quantization is not None:
            _check_quant(ov.quantization, (*base, "overrides", target, "quantization"),
                         f"models.{name}.overrides.{target}.quantization", err, model.task)
        for dim_name, override in ov.dims.items():
            at = (*base, "overrides", target, "dims", dim_name)
            dotted = f"models.{name}.overrides.{target}.dims.{dim_name}"
            if dim_name not in model.dims:
                err(at, f"{dotted}: the model has no dim '{dim_name}'",
                    closest(dim_name, model.dims) or f"its dims: {', '.join(model.dims) or 'none'}", key=True)
            else:
                _check_dim(override.under(model.dims[dim_name]), at, dotted, err)


def _npu(name: str, model: ModelSpec, m: Manifest, err: Err) -> None:
    """The static form is made for deployc's decoder interface, within the model's positions."""
    places = [(("models", name, "npu"), model.npu)] + [(("models", name, "overrides", t, "npu"), o.npu)
                                                         for t, o in model.overrides.items()]
    context = model.constants.get("max_seq_len")
    for path, npu in places:
        if npu is None:
            continue
        dotted = ".".join(map(str, path))
        if model.task != "text-generation" or list(model.inputs) != ["tokens", "input_pos"]:
            err(path, f"{dotted}: the static form applies to text-generation models with the decoder's inputs "
                "(tokens, input_pos)", key=True)
        elif npu.prefill > npu.context:
            err((*path, "prefill"), f"{dotted}.prefill: a chunk of {npu.prefill} tokens is longer than the context "
                f"of {npu.context}", f"prefill: {npu.context} or less")
        elif isinstance(context, int) and npu.context > context:
            err((*path, "context"), f"{dotted}.context: {npu.context} positions are beyond the model's "
                f"constants.max_seq_len ({context})", f"context: {context} or less")


def _check_dim(dim: DimSpec, path: tuple[str | int, ...], dotted: str, err: Err) -> None:
    if dim.min > dim.max:
        err(path, f"{dotted}: min {dim.min} is greater than max {dim.max}")
    elif dim.bounds()[0] > dim.bounds()[1]:
        err(path, f"{dotted}: no multiple of {dim.multiple_of} lies between min {dim.min} and max {dim.max}",
            f"max: {dim.bounds()[0]}")


def _check_quant(q: QuantSpec, path: tuple[str | int, ...], dotted: str, err: Err, task: str) -> None:
    if q.calibration is not None and q.calibration.text is not None and task != "text-generation":
        err((*path, "calibration", "text"), f"{dotted}.calibration.text: a calibration text is for text-generation "
                                            f"models; this one's task is {task}",
            "calibrate it with `samples` (seeded inputs) or a `dataset`")
    named = [q.scheme] if q.scheme is not None else q.choose if isinstance(q.choose, list) else None
    if named is None:  # auto: each option applies to the candidates that take it
        return
    single = q.scheme is not None
    if q.group_size is not None and not any(SCHEMES[n].grouped for n in named):
        which = f"scheme '{q.scheme}' is not grouped" if single else f"none of {', '.join(named)} is grouped"
        err((*path, "group_size"), f"{dotted}.group_size: {which}",
            "group_size applies to " + ", ".join(s.name for s in SCHEMES.values() if s.grouped))
    if q.calibration is not None and not any(SCHEMES[n].calibrated for n in named):
        which = (f"scheme '{q.scheme}' takes no calibration" if single
                 else f"none of {', '.join(named)} takes calibration")
        err((*path, "calibration"), f"{dotted}.calibration: {which}",
            "calibration applies to " + ", ".join(s.name for s in SCHEMES.values() if s.calibrated))
    if "float_fallback" in q.model_fields_set and not any(SCHEMES[n].calibrated for n in named):
        which = (f"scheme '{q.scheme}' is not static" if single
                 else f"none of {', '.join(named)} is static")
        err((*path, "float_fallback"), f"{dotted}.float_fallback: {which}",
            "float_fallback applies to " + ", ".join(s.name for s in SCHEMES.values() if s.calibrated))


# Every model's rules, in the order their problems are reported.
MODEL_RULES: tuple[Callable[[str, ModelSpec, Manifest, Err], None], ...] = (
    _source, _verify_fits_task, _npu, _shape_dims_declared, _methods, _bool_ranges, _dims, _quantization, _overrides)


def parse_manifest(doc: Document) -> Manifest:
    """Structure only; `check_references` finds the rest (deployc.load.project runs both)."""
    try:
        return Manifest.model_validate(doc.data)
    except ValidationError as exc:
        raise ManifestError(diagnostics_from(exc, doc, Manifest)) from None
