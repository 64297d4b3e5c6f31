"""The BuildPlan: a frozen, JSON-serializable record of everything `apply` does, and nothing else it
needs. `deployc plan --out plan.json` saves it; `deployc build --plan plan.json` applies exactly it.

A unit is one (model, target, compute unit). Its steps are typed records, executed in order. Each
step's key folds the previous step's key, so a change anywhere upstream changes every key below it.
The program key (the `serialize` step's key) covers only what changes the program's bytes, never
labels: two targets lowering the same model the same way share one program.

Locations (`*_at`) and absolute paths are for messages and for finding files again; they are never
part of a key, so the same manifest planned in two checkouts gives the same keys.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar

from pydantic import Field, ValidationError

from deployc.core.atomic import write_atomic
from deployc.core.dims import DimPlan
from deployc.core.errors import Location, UserError
from deployc.core.quantization import Recipe
from deployc.core.records import Frozen, GgufRef
from deployc.pipeline.config import PipelineConfig
from deployc.pipeline.declarations import IndexAgreement, TokenizerAsset
from deployc.plan.toolchain import Toolchain

PLAN_SCHEMA_VERSION = 3


class SourceFile(Frozen):
    path: str  # relative to the root it was found under (the manifest's folder, or a Python path entry)
    sha256: str


class InputPlan(Frozen):
    name: str
    shape: list[int | str]
    dtype: str
    range: tuple[float, float]
    fill: str = "random"


class OutputPlan(Frozen):
    name: str
    shape: list[int | str]
    dtype: str


class Declared(Frozen):
    """Where the manifest declares something a build step can fail on, for a located error."""

    at: Location
    field: str  # its dotted name, e.g. models.clf.dims.seq


class LoadModel(Frozen):
    step: Literal["load"] = "load"
    key: str = ""
    factory: str | None  # 'module:callable', or None for a Hugging Face directory
    huggingface: str | None = None  # the model directory, relative to the manifest
    gguf: GgufRef | None = None  # a GGUF file as the manifest names it (a path, or a file in a package)
    task: str = "other"  # with a directory: which transformers class to build
    derived: list[str] = []  # fields taken from the directory's config (inputs, outputs, dims, constants)
    context: int | None = None  # a decoder from a directory: the positions its KV cache holds
    kwargs: dict[str, Any]
    checkpoint: str | None  # path relative to the manifest
    checkpoint_sha256: str | None
    seed: int
    sources: list[SourceFile]  # the factory's code, or the directory's config and weights
    packages: dict[str, str] = {}  # installed distributions the sources import -> version


class MethodPlan(Frozen):
    name: str
    function: str
    inputs: list[InputPlan]


class HeldOutText(Frozen):
    """The text a text-generation program is judged on, tokenized at plan time: its ids decide the
    verification's calls, so they are part of the program's key (a new text measures again)."""

    file: str  # relative to the manifest, or deployc's default sample
    sha256: str
    tokenizer: str  # where the ids come from, in words
    windows: list[list[int]]  # fed one token a call from position 0; each call's logits predict the next id
    prompts: list[list[int]]  # greedy parity: eager generates from each, the program is fed the same calls


class CalibrationText(Frozen):
    """The text a decoder's static quantization is calibrated on, tokenized at plan time (its ids are part of
    the program's key); never the held-out text it is judged on."""

    file: str  # relative to the manifest, or deployc's calibration sample
    sha256: str
    tokenizer: str  # where the ids come from, in words
    sequences: list[list[int]]  # each read from position 0 as the driver reads a prompt


class StaticForm(Frozen):
    """A decoder built in the static form an NPU takes (graph/static_decoder.py): a prefill method of
    `prefill` tokens a call and a decode method of one (`decode: own`) or decoding through the prefill
    method (`decode: prefill`: one graph, its weights once), KV caches of `context` positions in and out."""

    prefill: int
    context: int
    decode: Literal["own", "prefill"] = "own"
    # The token every prompt starts with (the model's bos), whose position 0 the build computes in float and
    # stores in the program (npu.prefix: bos); None: position 0 through the program like the rest.
    prefix_token: int | None = None


class Export(Frozen):
    step: Literal["export"] = "export"
    key: str = ""
    inputs: list[InputPlan]  # forward's
    dims: list[DimPlan]
    seed: int
    methods: list[MethodPlan] = []  # further methods of the same program
    # Text-generation programs with the decoder interface: the verification's text, or why there is none.
    text: HeldOutText | None = None
    text_reason: str = ""
    static: StaticForm | None = None  # a decoder exported in the static form instead of `forward`


class Quantize(Frozen):
    step: Literal["quantize"] = "quantize"
    key: str = ""
    recipe: Recipe
    description: str  # what the backend builds for the recipe, in words
    text: CalibrationText | None = None  # a calibrated decoder's calibration text, where it has a tokenizer


class Lower(Frozen):
    step: Literal["lower"] = "lower"
    key: str = ""
    backend: str
    partitioners: list[str]
    options: dict[str, Any]
    constants: dict[str, Any] = {}  # compiled in as constant methods get_<name>
    code: str = ""  # sha256 of the backend's module: an edit to it rebuilds its programs
    toolchain: dict[str, str] = {}  # the backend's own toolchain (QNN: library version, layer hash)


class Serialize(Frozen):
    step: Literal["serialize"] = "serialize"
    key: str = ""
    memory_planning: str = "greedy"
    external_weights: bool = False  # weights (delegated and not) go to a .ptd data file beside the .pte


class TaskData(Frozen):
    """The samples a program's task measure is computed on (manifest `verify.data`); its content is part
    of the key (new samples measure again)."""

    file: str  # relative to the manifest
    sha256: str
    samples: int
    measure: Literal["top1", "topk"]  # a classifier's top class; an embedder's nearest neighbours
    topk: int = 5

    def measure_spec(self) -> dict[str, Any]:
        """How the self-test vectors say the samples are measured."""
        return {"measure": self.measure, "k": self.topk} if self.measure == "topk" else {"measure": self.measure}


# A decoder judged on held-out text: its logits' cosine and SQNR at seeded token ids are reported, and
# judged only where the manifest sets a tolerance for them (a quantized decoder that keeps its perplexity
# may still move logits it never ranks first; docs/manifest.md, "Verifying a decoder").
NOT_JUDGED_COSINE, NOT_JUDGED_SQNR = -1.0, -300.0


class Verify(Frozen):
    step: Literal["verify"] = "verify"
    key: str = ""
    run: bool
    reason: str  # why it will not run, when run is false
    points: list[dict[str, int]]  # one size per dynamic dim: min, a middle, max
    inputs: int = 1  # seeded random inputs run at each point, the worst judged
    min_cosine: float
    min_sqnr_db: float
    max_abs: float | None
    generate: int = 0  # greedy tokens per fixed prompt compared with eager (text-generation programs); 0: none
    min_tokens: int = 0  # of them, how many leading ones must match
    prompts: int = 8  # greedy parity prompts (fewer where a static decoder's verification must fit its budget)
    # A decoder in the static form verified on an emulator, or a decoder's arm64 check under qemu: the seconds it
    # may take, and the plan's estimate of them (plan/static_checks.py, plan/arm64_checks.py); None elsewhere, or
    # without a parameter count to estimate from.
    budget_s: float | None = None
    estimate_s: float | None = None
    # Text-generation programs judged on held-out text (Export.text): the program's perplexity over
    # eager fp32's, the mean KL divergence of its next-token distribution from eager's, the share of
    # positions where both pick the same most likely token.
    max_perplexity_ratio: float | None = None
    max_kl: float | None = None
    min_top1: float | None = None
    # An arm64 device's CPU program is also run by ExecuTorch's arm64 runtime under qemu-aarch64, emulating
    # this CPU model (the profile's device.emulated_cpu); "": no arm64 check.
    arm64_cpu: str = ""
    # The points the arm64 check runs (None: all of them): a decoder's, those that fit the budget (budget_s) by
    # the plan's estimate (estimate_s; plan/arm64_checks.py), smallest first. Its held-out positions always run.
    arm64_points: list[dict[str, int]] | None = None
    # Run is true but the program is not: its lowered graph runs in PyTorch with these reference kernels
    # (the backend's `host_reference`), because this host's runtime has none of its kernels.
    host_reference: str = ""
    # The unit runs int8 kernels only and the model does not allow others: a program with operators left
    # outside them fails (ProgramFacts.float_ops).
    int8_only: bool = False
    # Task measures on `data` (TaskData.measure): top-1 agreement with eager (min_top1, above) for a
    # classifier, top-k neighbour overlap for an embedder.
    data: TaskData | None = None
    min_topk_overlap: float | None = None


class CheckBudget(Frozen):
    step: Literal["budget"] = "budget"
    key: str = ""
    limits: dict[str, int]  # storage/flash: program size; ram/sram: planned memory (+ weights for ram)
    estimate_bytes: int | None  # from the manifest's `params`, when given


class Package(Frozen):
    step: Literal["package"] = "package"
    key: str = ""
    file: str
    format: Literal["pte", "tflite"] = "pte"  # ExecuTorch program or LiteRT flatbuffer
    task: str = "other"
    outputs: list[OutputPlan] = []  # declared names and shapes; checked against the built program
    method_outputs: dict[str, list[OutputPlan]] = {}  # the same for further methods
    requirements: dict[str, str] = {}  # what the device needs beyond the runtime (runtime config)
    data_file: str = ""  # the program's .ptd in the bundle (weights: external), "" when it has none


Step = Annotated[LoadModel | Export | Quantize | Lower | Serialize | Verify | CheckBudget | Package,
                 Field(discriminator="step")]
STEP_ORDER = ("load", "export", "quantize", "lower", "serialize", "verify", "budget", "package")
# What a unit's content key leaves out: keys and code hashes fold the toolchain, descriptions are words.
NOT_CONTENT = frozenset({"key", "code", "description"})

S = TypeVar("S", bound=Frozen)


class Skipped(Frozen):
    unit: str
    backend: str
    reason: str


class SkippedScheme(Frozen):
    scheme: str
    reason: str


class Choice(Frozen):
    """A unit choosing its scheme by measurement (manifest `quantization.choose`): the rule, not a guess.
    The build verifies `schemes` in order and keeps the first that meets every tolerance (`by: size`), or
    verifies them all and keeps the fastest that does (`by: latency`)."""

    by: Literal["size", "latency"]
    auto: bool  # the candidates are every scheme the unit accepts
    schemes: list[str]  # the candidates planned, in the order the build tries them
    passed_over: list[SkippedScheme] = []  # schemes of the choice this unit cannot build, and why


class UnitPlan(Frozen):
    model: str
    target: str
    unit: str
    backend: str
    quantization: str
    program_key: str
    threads: int | None
    warmup: int
    steps: list[Step]
    skipped: list[Skipped]
    # With `fallback: next`, the next units that can build the model, tried in order when building on
    # this one fails (a backend that cannot lower the graph). Planned in full, keys and all.
    fallbacks: list[UnitPlan] = []
    # With a choice of schemes: the unit's further candidates (this plan is the first), planned in full;
    # every candidate carries the choice.
    candidates: list[UnitPlan] = []
    choice: Choice | None = None
    # The model's weight count where the plan knows it (the manifest's `params`, a decoder's config): a build
    # starts its largest programs first, so that the longest lowering does not start last.
    weights: int | None = None
    outputs_at: dict[str, Location] = {}  # method -> where its outputs are declared in the manifest
    dims_at: dict[str, Declared] = {}  # dim -> where this target's range of it is declared (or derived)

    @property
    def label(self) -> str:
        """How progress, logs, errors and reports name the unit: model@target/unit (:scheme when it is a
        candidate of a choice of schemes, each built as its own program)."""
        return f"{self.model}@{self.target}/{self.unit}" + (f":{self.quantization}" if self.choice else "")

    @property
    def slug(self) -> str:
        """The label as a file name (unit logs, the cache's record of each unit's last program)."""
        return self.label.replace("@", "--").replace("/", "--").replace(":", "--")

    def _step(self, kind: type[S]) -> S:
        return next(s for s in self.steps if isinstance(s, kind))

    @property
    def load(self) -> LoadModel:
        return self._step(LoadModel)

    @property
    def export(self) -> Export:
        return self._step(Export)

    @property
    def quantize(self) -> Quantize:
        return self._step(Quantize)

    @property
    def lower(self) -> Lower:
        return self._step(Lower)

    @property
    def verify(self) -> Verify:
        return self._step(Verify)

    @property
    def serialize(self) -> Serialize:
        return self._step(Serialize)

    @property
    def budget(self) -> CheckBudget:
        return self._step(CheckBudget)

    @property
    def package(self) -> Package:
        return self._step(Package)


class TokenizerAssetPlan(Frozen):
    kind: Literal["tokenizer"] = "tokenizer"
    name: str
    file: str  # inside the bundle
    source: TokenizerAsset  # where the manifest says it comes from (found again at apply)
    sha256: str


class IndexQueryCheck(Frozen):
    """pipeline.indexes.<name>.queries: the queries themselves (part of the index's key) and the tolerance;
    `eager`: how the embedder's eager fp32 model is loaded to compute the reference rankings."""

    file: str
    queries: list[str]
    topk: int
    min_topk_overlap: float
    eager: LoadModel


class IndexAssetPlan(Frozen):
    """A vector index, embedded at build time by the target's built embedder program."""

    kind: Literal["vector_index"] = "vector_index"
    name: str
    file: str  # the index's JSON inside the bundle; vectors go beside it (layout.index_vectors_file)
    model: str
    program_key: str  # the embedder's program on this target (planner.embedder_key: all it may be, with fallbacks)
    tokenizer: str | None = None  # a text corpus: chunks tokenized by this asset ...
    tokenizer_sha256: str | None = None
    max_tokens: int = 0
    pad_to: int | None = None  # every chunk padded to this many tokens (a static-length program)
    words: int = 0
    overlap: int = 0
    image_steps: list[dict[str, Any]] | None = None  # ... or an image corpus: each image prepared by these
    corpus: list[SourceFile]  # relative to the manifest's folder
    # embed_with: reference: the host program that embeds the corpus instead of the target's (built, never
    # shipped), and how the substitution is proven on a sample the target's program embeds too.
    reference: UnitPlan | None = None
    agreement: IndexAgreement | None = None
    queries: IndexQueryCheck | None = None  # retrieval agreement with eager fp32 on a query set
    key: str = ""  # content key of the built index: everything above but names


AssetPlan = Annotated[TokenizerAssetPlan | IndexAssetPlan, Field(discriminator="kind")]


class BundlePlan(Frozen):
    dir: str  # relative to the output directory
    archive: str
    # What the manifest and profile say about every file (tool versions and deployc's code left out):
    # compared with an existing release's lock, it tells before any lowering whether the release changes.
    bundle_key: str
    content_keys: dict[str, str]  # bundle file -> its content key (programs and assets)


class TargetPlan(Frozen):
    target: str  # the manifest's reference to the profile
    profile: str
    profile_key: str  # key of the profile as parsed (after extends:)
    device: dict[str, str]
    units: list[UnitPlan]
    assets: list[AssetPlan] = []
    pipeline: PipelineConfig | None = None  # the runtime config's pipeline section for this target
    bundle: BundlePlan


class ManifestRef(Frozen):
    name: str
    version: str
    file: str  # the manifest's file name (the lock file records it)
    folder: str  # absolute: model code, datasets and corpora are found relative to it
    sha256: str
    version_at: Location  # for "release exists" errors


class HashedFile(Frozen):
    """A file the plan read: apply refuses to run when it changed since."""

    path: str  # absolute
    sha256: str
    role: str  # manifest, profile, model source, checkpoint, calibration dataset, tokenizer, corpus


class BuildPlan(Frozen):
    schema_version: int = PLAN_SCHEMA_VERSION
    manifest: ManifestRef
    toolchain: Toolchain
    targets: list[TargetPlan]
    inputs: list[HashedFile] = []

    @property
    def folder(self) -> Path:
        return Path(self.manifest.folder)

    def units(self) -> list[UnitPlan]:
        return [u for t in self.targets for u in t.units]

    def programs(self) -> dict[str, UnitPlan]:
        """One unit per distinct program key: what the build has to make (fallbacks only when needed)."""
        out: dict[str, UnitPlan] = {}
        for u in self.units():
            out.setdefault(u.program_key, u)
        return out

    def references(self) -> dict[str, UnitPlan]:
        """The host reference programs indexes are embedded with (`embed_with: reference`), by program key:
        built for the build's own use, never shipped."""
        return {a.reference.program_key: a.reference for t in self.targets for a in t.assets
                if isinstance(a, IndexAssetPlan) and a.reference is not None}


def plan_json(plan: BuildPlan) -> dict[str, Any]:
    return plan.model_dump(mode="json")


def save_plan(plan: BuildPlan, path: Path) -> None:
    """Written atomically: a reader never sees half a plan."""
    write_atomic(path, json.dumps(plan_json(plan), indent=2, sort_keys=True) + "\n")


def load_plan(path: Path) -> BuildPlan:
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise UserError.at(path, "no such plan file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError.at(path, f"cannot read the plan: {exc}") from None
    except json.JSONDecodeError as exc:
        raise UserError.at(path, f"not a deployc plan (invalid JSON: {exc.msg})", exc.lineno, exc.colno) from None
    version = data.get("schema_version") if isinstance(data, dict) else None
    if version != PLAN_SCHEMA_VERSION:
        raise UserError.at(path, f"plan schema version {version!r}; this deployc applies version "
                                 f"{PLAN_SCHEMA_VERSION}", hint="make the plan again with this deployc: deployc plan "
                                                                "MANIFEST --out PLAN")
    try:
        return BuildPlan.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise UserError.at(path, f"not a valid deployc plan: {where}: {first['msg']} "
                                 f"({exc.error_count()} problem(s))") from None
