"""Resolved specs + toolchain facts -> a frozen, JSON-serializable BuildPlan. Pure: no torch, no writes, no clock.

A unit is one (model, target, compute unit). Its steps are typed records; `build` executes them in
order. Each step's key folds the previous step's key, so a change anywhere upstream changes every key
below it. The program key (the `serialize` step's key) covers only what changes the program's bytes,
never labels: two targets lowering the same model the same way share one program.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field

from deployc.errors import Diagnostic, PlanError
from deployc.fingerprint import file_sha256, key_of
from deployc.graph.pipeline import corpus_files, tokenizer_file
from deployc.graph.source import imported_packages, module_roots, source_files
from deployc.project import Project
from deployc.quantization import SCHEMES
from deployc.resolve import DEFAULT_FLOAT_RANGE, DEFAULT_INT_RANGE, ResolvedModel, resolve
from deployc.targets.backends import BACKENDS
from deployc.targets.profile import Budgets, Unit
from deployc.targets.recipes import Recipe, recipe_for
from deployc.toolchain import Toolchain

PLAN_SCHEMA_VERSION = 1

PARTITIONERS: dict[str, list[str]] = {
    "xnnpack": ["XnnpackPartitioner"],
    "vulkan": ["VulkanPartitioner"],
    "qnn": ["QnnPartitioner"],
    "cortex_m": [],  # Cortex-M rewrites ops in place (pass manager); no delegate
    "portable": [],
}


class _Rec(BaseModel):
    model_config = ConfigDict(frozen=True)


class SourceFile(_Rec):
    path: str  # relative to the root it was found under
    sha256: str


class InputPlan(_Rec):
    name: str
    shape: list[int | str]
    dtype: str
    range: tuple[float, float]
    fill: str = "random"


class OutputPlan(_Rec):
    name: str
    shape: list[int | str]
    dtype: str


class DimPlan(_Rec):
    name: str
    min: int
    max: int


class LoadModel(_Rec):
    step: Literal["load"] = "load"
    key: str = ""
    factory: str
    kwargs: dict[str, Any]
    checkpoint: str | None  # path relative to the manifest
    checkpoint_sha256: str | None
    seed: int
    sources: list[SourceFile]
    packages: dict[str, str] = {}  # installed distributions the sources import -> version


class MethodPlan(_Rec):
    name: str
    function: str
    inputs: list[InputPlan]


class Export(_Rec):
    step: Literal["export"] = "export"
    key: str = ""
    inputs: list[InputPlan]  # forward's
    dims: list[DimPlan]
    seed: int
    methods: list[MethodPlan] = []  # further methods of the same program


class Quantize(_Rec):
    step: Literal["quantize"] = "quantize"
    key: str = ""
    recipe: Recipe


class Lower(_Rec):
    step: Literal["lower"] = "lower"
    key: str = ""
    backend: str
    partitioners: list[str]
    options: dict[str, Any]
    constants: dict[str, Any] = {}  # compiled in as constant methods get_<name>


class Serialize(_Rec):
    step: Literal["serialize"] = "serialize"
    key: str = ""
    memory_planning: str = "greedy"


class Verify(_Rec):
    step: Literal["verify"] = "verify"
    key: str = ""
    run: bool
    reason: str  # why it will not run, when run is false
    points: list[dict[str, int]]  # one size per dynamic dim: min, a middle, max
    min_cosine: float
    min_sqnr_db: float
    max_abs: float | None


class CheckBudget(_Rec):
    step: Literal["budget"] = "budget"
    key: str = ""
    limits: dict[str, int]  # storage/flash: program size; ram/sram: planned memory (+ weights for ram)
    estimate_bytes: int | None  # from the manifest's `params`, when given


class Package(_Rec):
    step: Literal["package"] = "package"
    key: str = ""
    file: str
    task: str = "other"
    outputs: list[OutputPlan] = []  # declared names and shapes; checked against the built program
    method_outputs: dict[str, list[OutputPlan]] = {}  # the same for further methods


Step = Annotated[Union[LoadModel, Export, Quantize, Lower, Serialize, Verify, CheckBudget, Package],
                 Field(discriminator="step")]


class Skipped(_Rec):
    unit: str
    backend: str
    reason: str


class UnitPlan(_Rec):
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

    def step_of(self, kind: str) -> Any:
        return next(s for s in self.steps if s.step == kind)

    @property
    def label(self) -> str:
        """How progress lines and reports name the unit: model@target/unit."""
        return f"{self.model}@{self.target}/{self.unit}"


class TokenizerAssetPlan(_Rec):
    kind: Literal["tokenizer"] = "tokenizer"
    name: str
    file: str  # inside the bundle
    sha256: str


class IndexAssetPlan(_Rec):
    """A vector index, embedded at build time by the target's built embedder program."""

    kind: Literal["vector_index"] = "vector_index"
    name: str
    file: str  # the index's JSON inside the bundle; vectors go beside it as <name>.f32
    model: str
    program_key: str  # the embedder's program on this target
    tokenizer: str
    tokenizer_sha256: str
    max_tokens: int
    words: int
    overlap: int
    corpus: list[SourceFile]  # relative to the manifest's folder
    key: str = ""  # content key of the built index: everything above


AssetPlan = Annotated[Union[TokenizerAssetPlan, IndexAssetPlan], Field(discriminator="kind")]


class TargetPlan(_Rec):
    target: str
    profile: str
    profile_sha256: str
    device: dict[str, str]
    units: list[UnitPlan]
    assets: list[AssetPlan] = []


class ManifestRef(_Rec):
    name: str
    version: str
    path: str
    sha256: str


class BuildPlan(_Rec):
    schema_version: int = PLAN_SCHEMA_VERSION
    manifest: ManifestRef
    toolchain: dict[str, str]
    targets: list[TargetPlan]

    def units(self) -> list[UnitPlan]:
        return [u for t in self.targets for u in t.units]

    def programs(self) -> dict[str, UnitPlan]:
        """One unit per distinct program key: what the build actually has to make."""
        out: dict[str, UnitPlan] = {}
        for u in self.units():
            out.setdefault(u.program_key, u)
        return out


def _sources(project: Project, factory: str) -> tuple[list[SourceFile], dict[str, str]]:
    roots = module_roots(project.folder)
    out = []
    files = source_files(factory.split(":")[0], roots)
    for f in files:
        root = next(r for r in roots if f.is_relative_to(r))
        out.append(SourceFile(path=f.relative_to(root).as_posix(), sha256=file_sha256(f)))
    return out, imported_packages(files, roots[:1])


def _points(dims: list[DimPlan]) -> list[dict[str, int]]:
    if not dims:
        return [{}]
    points = [{d.name: d.min for d in dims}, {d.name: (d.min + d.max) // 2 for d in dims}, {d.name: d.max for d in dims}]
    unique: list[dict[str, int]] = []
    for p in points:
        if p not in unique:
            unique.append(p)
    return unique


def _budget_limits(profile_budgets: Budgets, unit: Unit) -> dict[str, int]:
    limits = {k: v for k, v in profile_budgets.model_dump().items() if v is not None}
    if unit.budgets is not None:
        limits.update({k: v for k, v in unit.budgets.model_dump().items() if v is not None})
    return limits


def _choose_unit(r: ResolvedModel, toolchain: Toolchain) -> tuple[Unit, Recipe, list[Skipped]]:
    profile = r.profile.profile
    scheme = r.quantization.scheme
    candidates = [profile.unit(r.unit)] if r.unit else list(profile.units)
    skipped: list[Skipped] = []
    dynamic = sorted(r.spec.dims)
    for unit in candidates:
        assert unit is not None  # pins were checked at load time
        backend = BACKENDS[unit.backend]
        recipe = recipe_for(unit.backend, r.quantization)
        problem = None
        if scheme not in unit.quantization or recipe is None:
            problem = f"accepts {', '.join(unit.quantization)}; not {scheme}"
        elif not toolchain.backends[unit.backend].usable:
            reason = toolchain.backends[unit.backend].reason
            if profile.fallback == "error" or r.unit:
                why = "the model pins this unit" if r.unit else f"profile '{profile.name}' has fallback: error"
                raise PlanError([Diagnostic(r.unit_at or r.quantization_at,
                                            f"models.{r.model}: unit '{unit.name}' ({unit.backend}) of target "
                                            f"'{r.target}' cannot build on this machine: {reason}; {why}",
                                            "install the toolchain, or set fallback: next in the profile")])
            problem = f"toolchain not usable here: {reason}"
        elif backend.static_shapes_only and dynamic:
            problem = f"needs static shapes; the model declares dynamic dims {', '.join(dynamic)}"
        if problem is None:
            return unit, recipe, skipped  # type: ignore[return-value]
        if r.unit:
            raise PlanError([Diagnostic(r.unit_at or r.quantization_at,
                                        f"models.{r.model}.overrides.{r.target}.unit: unit '{unit.name}' "
                                        f"({unit.backend}) cannot build this model: {problem}",
                                        f"unit '{unit.name}' supports: {', '.join(unit.quantization)}")])
        skipped.append(Skipped(unit=unit.name, backend=unit.backend, reason=problem))
    summary = "; ".join(f"{s.unit} ({s.backend}): {s.reason}" for s in skipped)
    raise PlanError([Diagnostic(r.quantization_at,
                                f"{r.quantization_field}: no unit of target '{r.target}' can build model "
                                f"'{r.model}' with scheme '{scheme}'",
                                summary)])


def _outputs(specs: dict[str, Any]) -> list[OutputPlan]:
    return [OutputPlan(name=n, shape=list(o.shape), dtype=o.dtype) for n, o in specs.items()]


def _inputs(specs: dict[str, Any]) -> list[InputPlan]:
    return [InputPlan(name=n, shape=list(i.shape), dtype=i.dtype, fill=i.fill,
                      range=i.range or (DEFAULT_FLOAT_RANGE if i.dtype.startswith(("float", "bfloat"))
                                        else (0.0, 1.0) if i.dtype == "bool" else DEFAULT_INT_RANGE))
            for n, i in specs.items()]


def _unit_plan(project: Project, r: ResolvedModel, toolchain: Toolchain) -> UnitPlan:
    unit, recipe, skipped = _choose_unit(r, toolchain)
    if recipe.calibration_dataset:  # its content, not its name, decides the program
        recipe = recipe.model_copy(update={"calibration_dataset_sha256":
                                           file_sha256(project.folder / recipe.calibration_dataset)})
    spec = r.spec
    ckpt = spec.source.checkpoint
    dims = [DimPlan(name=n, min=d.min, max=d.max) for n, d in spec.dims.items()]
    inputs = _inputs(spec.inputs)
    methods = [MethodPlan(name=n, function=meth.function or n, inputs=_inputs(meth.inputs))
               for n, meth in spec.methods.items()]
    backend = BACKENDS[unit.backend]
    tol = r.tolerances
    if not tol.enabled:
        run, reason = False, "verification disabled in the manifest"
    elif not backend.host_runnable:
        run, reason = False, f"not run on this host: {backend.not_run_reason}"
    else:
        run, reason = True, ""
    estimate = None
    if spec.params is not None:
        estimate = spec.params * SCHEMES[recipe.scheme].weight_bits // 8
    sources, packages = _sources(project, spec.source.factory)
    steps: list[Any] = [
        LoadModel(factory=spec.source.factory, kwargs=spec.source.kwargs, checkpoint=ckpt.path if ckpt else None,
                  checkpoint_sha256=ckpt.sha256 if ckpt else None, seed=spec.seed,
                  sources=sources, packages=packages),
        Export(inputs=inputs, dims=dims, seed=spec.seed, methods=methods),
        Quantize(recipe=recipe),
        Lower(backend=unit.backend, partitioners=PARTITIONERS[unit.backend], options=unit.options,
              constants=spec.constants),
        Serialize(),
        Verify(run=run, reason=reason, points=_points(dims), min_cosine=tol.min_cosine,
               min_sqnr_db=tol.min_sqnr_db, max_abs=tol.max_abs),
        CheckBudget(limits=_budget_limits(r.profile.profile.budgets, unit), estimate_bytes=estimate),
        Package(file=f"{r.model}.pte", task=spec.task, outputs=_outputs(spec.outputs),
                method_outputs={n: _outputs(meth.outputs) for n, meth in spec.methods.items() if meth.outputs}),
    ]
    keyed = []
    previous = key_of(toolchain.versions)
    program_key = ""
    for s in steps:
        previous = key_of(previous, s.model_dump(mode="json", exclude={"key"}))
        keyed.append(s.model_copy(update={"key": previous}))
        if isinstance(s, Serialize):
            program_key = previous
    return UnitPlan(model=r.model, target=r.target, unit=unit.name, backend=unit.backend,
                    quantization=recipe.scheme, program_key=program_key, threads=unit.threads,
                    warmup=unit.warmup, steps=keyed, skipped=skipped)


def _assets(project: Project, units: list[UnitPlan]) -> list[Any]:
    """The pipeline's tokenizer files and vector indexes for one target."""
    pipeline = project.manifest.pipeline
    if pipeline is None:
        return []
    folder = project.folder
    tokenizers = {name: tokenizer_file(t, folder) for name, t in pipeline.tokenizers.items()}
    out: list[Any] = [TokenizerAssetPlan(name=name, file=f"assets/tokenizers/{name}.json",
                                         sha256=file_sha256(path))
                      for name, path in sorted(tokenizers.items()) if path is not None]
    programs = {u.model: u.program_key for u in units}
    for name, ix in sorted(pipeline.indexes.items()):
        spec = project.manifest.models[ix.model]
        first = next(iter(spec.inputs.values()))
        dynamic = [spec.dims[d].max for d in first.shape if isinstance(d, str)]
        files, _ = corpus_files(ix, folder)
        plan = IndexAssetPlan(
            name=name, file=f"assets/indexes/{name}.json", model=ix.model, program_key=programs[ix.model],
            tokenizer=ix.tokenizer, tokenizer_sha256=file_sha256(tokenizers[ix.tokenizer]),  # type: ignore[arg-type]
            max_tokens=min(dynamic) if dynamic else int(first.shape[-1]),
            words=ix.chunking.words, overlap=ix.chunking.overlap,
            corpus=[SourceFile(path=f.relative_to(folder).as_posix(), sha256=file_sha256(f)) for f in files])
        out.append(plan.model_copy(update={"key": key_of(plan.model_dump(mode="json", exclude={"key", "name", "file"}))}))
    return out


def make_plan(project: Project, toolchain: Toolchain, only_target: str | None = None) -> BuildPlan:
    m = project.manifest
    if only_target is not None and only_target not in m.targets:
        raise PlanError([Diagnostic(project.doc.locate(("targets",)),
                                    f"--target {only_target}: not one of this manifest's targets: {', '.join(m.targets)}")])
    resolved = resolve(project)
    problems: list[Diagnostic] = []
    by_target: dict[str, list[UnitPlan]] = {t: [] for t in m.targets if only_target in (None, t)}
    for r in resolved:
        if r.target not in by_target:
            continue
        try:
            by_target[r.target].append(_unit_plan(project, r, toolchain))
        except PlanError as exc:
            problems.extend(exc.diagnostics)
    seen: dict[str, str] = {}
    for i, t in enumerate(m.targets):
        name = project.profiles[t].profile.name
        if name in seen:  # bundles are directories named after profiles
            problems.append(Diagnostic(project.doc.locate(("targets", i)),
                                       f"targets[{i}]: '{t}' is profile '{name}' again (also '{seen[name]}'); "
                                       "each target needs a distinct profile name"))
        seen.setdefault(name, t)
    if problems:
        raise PlanError(problems)
    targets = []
    for t, units in by_target.items():
        loaded = project.profiles[t]
        p = loaded.profile
        targets.append(TargetPlan(target=t, profile=p.name, profile_sha256=key_of(p.model_dump(mode="json")),
                                  device=p.device.model_dump(exclude_defaults=True), units=units,
                                  assets=_assets(project, units)))
    return BuildPlan(
        manifest=ManifestRef(name=m.name, version=m.version, path=project.path.name,
                             sha256=file_sha256(project.path)),
        toolchain=toolchain.versions, targets=targets)


def plan_json(plan: BuildPlan) -> dict[str, Any]:
    return plan.model_dump(mode="json")
