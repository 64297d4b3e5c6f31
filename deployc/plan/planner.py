"""Project + toolchain facts -> the BuildPlan. Pure: no torch, no model code, no writes, no clock.

For every (model, target) it picks the first unit of the profile that can build the model, records
every unit it passed over and why, writes the typed steps with their chained keys, plans the
pipeline's assets, and says what each target's bundle will be made of.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path, PurePath
from typing import Any, NamedTuple

from deployc.core import layout
from deployc.core.digests import key_of
from deployc.core.errors import Diagnostic, PlanError
from deployc.core.file_hashes import FileHashes
from deployc.core.quantization import GGUF_SCHEMES, SCHEMES, QuantSpec, Recipe
from deployc.load import hf_directory
from deployc.load.manifest import GENERATION_TOKENS, MIN_VERIFY_INPUTS, ModelSpec
from deployc.load.model_sources import (
    imported_packages,
    imported_versions,
    module_roots,
    source_files,
)
from deployc.load.project import Project
from deployc.pipeline.asset_sources import corpus_files, index_queries, tokenizer_file
from deployc.pipeline.config import pipeline_config
from deployc.pipeline.ops import image, op_of
from deployc.plan import arm64_checks, calibration_text, heldout, static_checks, task_data
from deployc.plan.build_plan import (
    NOT_CONTENT,
    NOT_JUDGED_COSINE,
    NOT_JUDGED_SQNR,
    STEP_ORDER,
    BuildPlan,
    BundlePlan,
    CalibrationText,
    CheckBudget,
    Choice,
    Declared,
    DimPlan,
    Export,
    HashedFile,
    HeldOutText,
    IndexAssetPlan,
    IndexQueryCheck,
    InputPlan,
    LoadModel,
    Lower,
    ManifestRef,
    MethodPlan,
    OutputPlan,
    Package,
    Quantize,
    Serialize,
    Skipped,
    SkippedScheme,
    SourceFile,
    StaticForm,
    TargetPlan,
    TaskData,
    TokenizerAssetPlan,
    UnitPlan,
    Verify,
)
from deployc.plan.resolve import (
    DEFAULT_FLOAT_RANGE,
    DEFAULT_INT_RANGE,
    ResolvedModel,
    resolve,
)
from deployc.plan.toolchain import Toolchain
from deployc.targets.backends import BACKENDS, Backend
from deployc.targets.profile import DEFAULT_EMULATED_CPU, Budgets, Device, Unit


class _Inputs:
    """Every file the plan read, once, with what it was read for (apply checks them again)."""

    def __init__(self, hashes: FileHashes) -> None:
        self.files: dict[str, HashedFile] = {}
        self.hashes = hashes
        self.sources: dict[str, tuple[list[SourceFile], dict[str, str]]] = {}  # factory module -> files, packages
        self._texts: dict[tuple[str, str], list[int]] = {}  # (text file, tokenizer) -> ids

    def text_ids(self, text: Path, tokenizer: Path) -> list[int]:
        """A held-out or calibration text's ids in a tokenizer, tokenized once per plan."""
        memo = (str(text), str(tokenizer))
        if memo not in self._texts:
            self._texts[memo] = heldout.text_ids(text, tokenizer)
        return self._texts[memo]

    def add(self, path: Path, role: str, sha256: str | None = None) -> str:
        key = str(path.resolve())
        if key not in self.files:
            self.files[key] = HashedFile(path=key, sha256=sha256 or self.hashes.sha256(path), role=role)
        return self.files[key].sha256


def verification_points(dims: list[DimPlan]) -> list[dict[str, int]]:
    """The sizes verification runs at: every dim at its min, at its middle, at its max (deduplicated)."""
    if not dims:
        return [{}]
    points = [{d.name: d.min for d in dims}, {d.name: d.middle() for d in dims}, {d.name: d.max for d in dims}]
    unique: list[dict[str, int]] = []
    for p in points:
        if p not in unique:
            unique.append(p)
    return unique


# A decoder's short prompt: this many tokens past its shortest. Seventeen rows fill two 8-row tiles of
# XNNPACK's multi-row GEMM kernels and leave a remainder row, so a prompt of this length runs the prefill's
# kernels at a fraction of the middle prompt's cost (under qemu: ~11 s against ~150 s for SmolLM2's 256).
SHORT_PROMPT = 16


def with_short_prompt(points: list[dict[str, int]], spec: ModelSpec, dims: list[DimPlan]) -> list[dict[str, int]]:
    """A decoder's points with a short prompt after the shortest, where its token dim has room below the middle:
    a check on a budget (arm64 under qemu) reaches the multi-token kernels without a long prompt."""
    shape = spec.inputs["tokens"].shape
    dim = next((d for d in dims if shape and d.name == shape[-1]), None)
    if dim is None or dim.min + SHORT_PROMPT >= dim.middle():
        return points
    first = points[0]
    return [first, {**first, dim.name: dim.min + SHORT_PROMPT}, *points[1:]]


def _inputs_per_point(points: list[dict[str, int]], text: HeldOutText | None) -> int:
    """At least MIN_VERIFY_INPUTS seeded inputs over the points; one a point for a decoder judged on held-out
    text (its cosine and SQNR are reported, not judged)."""
    return 1 if text is not None else -(-MIN_VERIFY_INPUTS // len(points))


def _sources(folder: Path, factory: str, inputs: _Inputs) -> tuple[list[SourceFile], dict[str, str]]:
    module = factory.split(":")[0]
    if module not in inputs.sources:  # once per plan: several units (targets) share a factory's files
        roots = module_roots(folder)
        out = []
        files = source_files(module, roots)
        for f in files:
            root = next(r for r in roots if f.is_relative_to(r))
            out.append(SourceFile(path=f.relative_to(root).as_posix(), sha256=inputs.add(f, "model source")))
        inputs.sources[module] = (out, imported_packages(files, roots[:1]))
    return inputs.sources[module]


def _budget_limits(profile_budgets: Budgets, unit: Unit) -> dict[str, int]:
    limits = {k: v for k, v in profile_budgets.model_dump().items() if v is not None}
    if unit.budgets is not None:
        limits.update({k: v for k, v in unit.budgets.model_dump().items() if v is not None})
    return limits


def _problem(r: ResolvedModel, unit: Unit, toolchain: Toolchain) -> tuple[Recipe | None, str | None]:
    """(the recipe, None) when `unit` can build the model here; else (None, why not)."""
    scheme = r.quantization.fixed
    backend = BACKENDS[unit.backend]
    recipe = backend.recipe(r.quantization)
    # gguf runs on 8da4w's kernels (4-bit blockwise weights, int8 dynamic activations): a unit taking one takes both
    accepted = scheme in unit.quantization or (scheme in GGUF_SCHEMES and "8da4w" in unit.quantization)
    if not accepted or recipe is None:
        return None, f"accepts {', '.join(unit.quantization)}; not {scheme}"
    if scheme in GGUF_SCHEMES and r.spec.source.gguf is None and r.spec.source.huggingface is None:
        return None, f"{scheme} keeps a GGUF file's blocks, or rounds a Hugging Face checkpoint's weights to them"
    if recipe.float_fallback and unit.int8_only and not r.tolerances.allow_float_ops:
        recipe = recipe.model_copy(update={"float_fallback": None})  # its float operators would fail the unit
    if not toolchain.backends[unit.backend].usable:
        return None, f"toolchain not usable here: {toolchain.backends[unit.backend].reason}"
    refused = backend.refusal(r.architecture, scheme) if r.architecture else None
    if refused:
        return None, f"cannot build {r.architecture} in {scheme}: {refused}"
    if SCHEMES[scheme].calibrated and r.spec.methods:
        return None, f"{scheme} is calibrated, which takes single-method programs; the model declares further methods"
    if r.spec.weights == "external" and not backend.external_weights:
        return None, "keeps its weights inside its delegate; the model asks for weights: external"
    if not backend.multi_method and (r.spec.methods or r.spec.constants):
        return None, "builds one method (forward); the model declares further methods or constants"
    if backend.static_decoders and is_decoder(r.spec):
        if r.npu is None:
            return None, ("takes a decoder only in its static form (KV caches in and out, fixed chunks): give "
                          f"models.{r.model}.npu: {{prefill: N, context: M}}, or overrides.{r.target}.npu")
        return recipe, None  # the static form's shapes are fixed whatever the dims say
    if backend.static_shapes_only and r.dynamic_dims:
        why = f" ({backend.static_shapes_reason})" if backend.static_shapes_reason else ""
        return None, (f"needs static shapes{why}; the model declares dynamic dims {', '.join(r.dynamic_dims)} "
                      "(make them "
                      f"static for this target: overrides.{r.target}.dims.<dim>: {{min: N, max: N}})")
    return recipe, None


Candidate = tuple[Recipe, ResolvedModel]


class _UnitCandidates(NamedTuple):
    """What one unit would build of a model: its candidates in the order the build tries them (one,
    unless the manifest gives a choice of schemes) and the schemes of the choice passed over."""

    unit: Unit
    candidates: list[Candidate]
    passed_over: list[SkippedScheme]


def _candidates_on(r: ResolvedModel, unit: Unit, toolchain: Toolchain) -> tuple[_UnitCandidates | None, str]:
    """(the unit's candidates, "") when it can build the model in at least one scheme; else (None, why not)."""
    q = r.quantization
    if q.scheme is not None:
        recipe, problem = _problem(r, unit, toolchain)
        return (_UnitCandidates(unit, [(recipe, r)], []) if recipe is not None else None), problem or ""
    backend = BACKENDS[unit.backend]
    if not r.tolerances.enabled:
        return None, "cannot choose a scheme by measurement: the manifest disables verification"
    if not toolchain.runs[unit.backend].usable and not backend.host_reference:
        return None, (f"cannot choose a scheme by measurement: its programs do not run on this host "
                      f"({toolchain.runs[unit.backend].reason})")
    found: list[Candidate] = []
    passed: list[SkippedScheme] = []
    for scheme in q.candidates(unit.quantization):
        candidate = r.with_scheme(scheme)
        recipe, problem = _problem(candidate, unit, toolchain)
        if recipe is None:
            passed.append(SkippedScheme(scheme=scheme, reason=problem or ""))
        else:
            found.append((recipe, candidate))
    if q.by == "size":  # fewest weight bits first; the manifest's (or the unit's) order among equals
        found.sort(key=lambda c: SCHEMES[c[0].scheme].weight_bits)
    if found:
        return _UnitCandidates(unit, found, passed), ""
    reasons = {p.reason for p in passed}
    if len(reasons) == 1 and next(iter(reasons)).startswith("toolchain"):
        return None, next(iter(reasons))
    if len(reasons) == 1:  # the unit's own limit (static shapes, weights inside the delegate): said once
        return None, f"no candidate scheme ({', '.join(p.scheme for p in passed)}): {next(iter(reasons))}"
    return None, "no candidate scheme: " + "; ".join(f"{p.scheme}: {p.reason}" for p in passed)


def _scheme_words(q: QuantSpec) -> str:
    if q.scheme is not None:
        return f"scheme '{q.scheme}'"
    return "any scheme (auto)" if q.choose == "auto" else f"any of {', '.join(q.choose or [])}"


def _building_units(r: ResolvedModel, toolchain: Toolchain) -> tuple[list[_UnitCandidates], list[Skipped]]:
    """The units that can build the model, in priority order (the first is used; with `fallback: next`
    the others are tried in turn when building on it fails), and the units passed over before it. A unit
    to fall back to that does not take a target override's scheme builds the model's own scheme."""
    profile = r.profile.profile
    units = [profile.unit(r.unit)] if r.unit else list(profile.units)
    skipped: list[Skipped] = []
    chosen: list[_UnitCandidates] = []
    for unit in units:
        assert unit is not None  # pins were checked at load time
        candidates, problem = _candidates_on(r, unit, toolchain)
        if candidates is not None:
            chosen.append(candidates)
            if r.unit or profile.fallback == "error":
                break
            continue
        if chosen:  # after the chosen unit: a candidate to fall back to, or nothing to report
            own = _candidates_on(r.own_scheme, unit, toolchain)[0] if r.own_scheme is not None else None
            if own is not None:
                chosen.append(own)
            continue
        if problem.startswith("toolchain") and (profile.fallback == "error" or r.unit):
            reason = toolchain.backends[unit.backend].reason
            why = "the model pins this unit" if r.unit else f"profile '{profile.name}' has fallback: error"
            raise PlanError([Diagnostic(r.unit_at or r.quantization_at,
                                        f"models.{r.model}: unit '{unit.name}' ({unit.backend}) of target "
                                        f"'{r.target}' cannot build on this machine: {reason}; {why}",
                                        "install the toolchain, or set fallback: next in the profile")])
        if r.unit:
            elsewhere = problem.startswith(("cannot build ", "takes a decoder only"))
            raise PlanError([Diagnostic(r.unit_at or r.quantization_at,
                                        f"models.{r.model}.overrides.{r.target}.unit: unit '{unit.name}' "
                                        f"({unit.backend}) cannot build this model: {problem}",
                                        "leave the unit out: the plan then takes the next unit that can" if elsewhere
                                        else f"unit '{unit.name}' supports: {', '.join(unit.quantization)}")])
        skipped.append(Skipped(unit=unit.name, backend=unit.backend, reason=problem))
    if chosen:
        return chosen, skipped
    summary = "; ".join(f"{s.unit} ({s.backend}): {s.reason}" for s in skipped)
    raise PlanError([Diagnostic(r.quantization_at,
                                f"{r.quantization_field}: no unit of target '{r.target}' can build model "
                                f"'{r.model}' with {_scheme_words(r.quantization)}",
                                summary)])


def _outputs(specs: dict[str, Any]) -> list[OutputPlan]:
    return [OutputPlan(name=n, shape=list(o.shape), dtype=o.dtype) for n, o in specs.items()]


def _inputs(specs: dict[str, Any]) -> list[InputPlan]:
    return [InputPlan(name=n, shape=list(i.shape), dtype=i.dtype, fill=i.fill,
                      range=i.range or (DEFAULT_FLOAT_RANGE if i.dtype.startswith(("float", "bfloat"))
                                        else (0.0, 1.0) if i.dtype == "bool" else DEFAULT_INT_RANGE))
            for n, i in specs.items()]


def _model_plan(project: Project, r: ResolvedModel, toolchain: Toolchain, inputs: _Inputs) -> UnitPlan:
    """A model on a target: its plan on the first unit that builds it, carrying the units to fall back to."""
    chosen, skipped = _building_units(r, toolchain)
    plans = [_unit_candidates_plan(project, candidates, toolchain, inputs) for candidates in chosen]
    return plans[0].model_copy(update={"skipped": skipped, "fallbacks": plans[1:]})


def _unit_candidates_plan(project: Project, candidates: _UnitCandidates, toolchain: Toolchain,
                          inputs: _Inputs) -> UnitPlan:
    """The unit's first candidate, carrying the others of a choice (planned in full, keys and all)."""
    plans = [_candidate_plan(project, resolved, candidates.unit, recipe, toolchain, inputs)
             for recipe, resolved in candidates.candidates]
    spec = candidates.candidates[0][1].choice
    if spec is None:
        return plans[0]
    choice = Choice(by=spec.by, schemes=[p.quantization for p in plans], passed_over=candidates.passed_over,
                    auto=spec.choose == "auto")
    plans = [p.model_copy(update={"choice": choice}) for p in plans]
    return plans[0].model_copy(update={"candidates": plans[1:]})


@dataclass(frozen=True)
class _Candidate:
    """One scheme of one model on one unit, as its steps are planned: what several of them read."""

    project: Project
    r: ResolvedModel
    unit: Unit
    recipe: Recipe  # with its calibration dataset's sha256, where it has one
    toolchain: Toolchain
    inputs: _Inputs
    spec: ModelSpec  # the model's, its max_seq_len the static form's context where it has one
    dims: list[DimPlan]
    static: StaticForm | None

    @property
    def backend(self) -> Backend:
        return BACKENDS[self.unit.backend]


def _candidate(project: Project, r: ResolvedModel, unit: Unit, recipe: Recipe, toolchain: Toolchain,
               inputs: _Inputs) -> _Candidate:
    """The candidate's files hashed (a calibration dataset, a checkpoint checked against its sha256), its dims,
    and a decoder's static form on a backend that builds decoders so."""
    folder = project.folder
    if recipe.calibration_dataset:  # its content, not its name, decides the program
        sha = inputs.add(folder / recipe.calibration_dataset, "calibration dataset")
        recipe = recipe.model_copy(update={"calibration_dataset_sha256": sha})
    spec = r.spec
    ckpt = spec.source.checkpoint
    if ckpt is not None:  # hashed now (remembered for large files): a changed file is found before building
        actual = inputs.add(folder / ckpt.path, "checkpoint")
        if actual != ckpt.sha256:
            raise PlanError([Diagnostic(project.doc.locate(("models", r.model, "source", "checkpoint", "sha256")),
                                        f"models.{r.model}.source.checkpoint.sha256: {ckpt.path} has sha256 {actual}, "
                                        f"not {ckpt.sha256}", "update the sha256 if the new weights are intended")])
    dims = [DimPlan(name=n, min=d.bounds()[0], max=d.bounds()[1], multiple_of=d.multiple_of or 1)
            for n, d in r.dims.items()]
    static = None
    if BACKENDS[unit.backend].static_decoders and is_decoder(spec) and r.npu is not None:
        # The program holds npu.context positions: the decoder is judged, and driven, within them.
        static = StaticForm(prefill=r.npu.prefill, context=r.npu.context, decode=r.npu.decode,
                            prefix_token=_prefix_token(project, r, spec))
        spec = spec.model_copy(update={"constants": {**spec.constants, "max_seq_len": static.context}})
        dims = [d.model_copy(update={"max": min(d.max, static.context)}) if d.name == "seq" else d for d in dims]
    return _Candidate(project, r, unit, recipe, toolchain, inputs, spec, dims, static)


def _prefix_token(project: Project, r: ResolvedModel, spec: ModelSpec) -> int | None:
    """The model's bos, unless npu.prefix is none; npu.prefix: bos on a model without one is an error."""
    assert r.npu is not None
    bos = spec.constants.get("bos_id")
    if r.npu.prefix == "none":
        return None
    if isinstance(bos, int) and not isinstance(bos, bool):
        return bos
    if r.npu.prefix == "bos":
        raise PlanError([Diagnostic(r.npu_at or project.doc.locate(("models", r.model)),
                                    f"models.{r.model}: npu.prefix is bos, but the model has no bos token "
                                    "(constants.bos_id)", "declare constants.bos_id, or set npu.prefix: none")])
    return None


def _load_step(c: _Candidate) -> LoadModel:
    spec, folder = c.spec, c.project.folder
    if spec.source.factory is not None:
        sources, packages = _sources(folder, spec.source.factory, c.inputs)
    else:  # a Hugging Face directory or a GGUF file: its config and weights decide the model
        model = hf_directory.source_model(spec.source, folder)
        base = model.folder if not model.gguf else model.weights[0].parent
        sources = [SourceFile(path=f.relative_to(base).as_posix(), sha256=c.inputs.add(f, "model weights"))
                   for f in model.files()]
        loaders = (() if model.gguf else ("safetensors",) if spec.task == "text-generation"
                   else ("transformers", "safetensors"))
        packages = imported_versions(loaders)
    ckpt = spec.source.checkpoint
    return LoadModel(factory=spec.source.factory, huggingface=spec.source.huggingface, gguf=spec.source.gguf,
                     task=spec.task,
                     derived=list(c.project.derived.get(c.r.model, ())), kwargs=spec.source.kwargs,
                     checkpoint=ckpt.path if ckpt else None, checkpoint_sha256=ckpt.sha256 if ckpt else None,
                     seed=spec.seed, sources=sources, packages=packages, context=_context(spec))


def _export_step(c: _Candidate, text: HeldOutText | None, text_reason: str) -> Export:
    methods = [MethodPlan(name=n, function=meth.function or n, inputs=_inputs(meth.inputs))
               for n, meth in c.spec.methods.items()]
    return Export(inputs=_inputs(c.spec.inputs), dims=c.dims, seed=c.spec.seed, methods=methods, text=text,
                  text_reason=text_reason, static=c.static)


def _lower_step(c: _Candidate) -> Lower:
    return Lower(backend=c.unit.backend, partitioners=list(c.backend.partitioners), options=c.unit.options,
                 constants=c.spec.constants, code=c.toolchain.code[c.unit.backend],
                 toolchain=c.toolchain.backends[c.unit.backend].facts)


def _runs(c: _Candidate) -> tuple[bool, str]:
    """Whether the candidate's program is verified here, and why not."""
    if not c.r.tolerances.enabled:
        return False, "verification disabled in the manifest"
    if not c.toolchain.runs[c.unit.backend].usable and not c.backend.host_reference:
        return False, f"not run on this host: {c.toolchain.runs[c.unit.backend].reason}"
    return True, ""


def _verify_step(c: _Candidate, text: HeldOutText | None, generate: int) -> Verify:
    tol, backend = c.r.tolerances, c.backend
    run, reason = _runs(c)
    device = c.unit.device or c.r.profile.profile.device
    arm64_cpu = (device.emulated_cpu or DEFAULT_EMULATED_CPU
                 if run and backend.arm64_checked and device.abi.startswith("arm64") else "")
    points = verification_points(c.dims)
    if c.static is not None:
        # One call of each kind the driver makes, a token and a full chunk: a longer prompt is more of the
        # same calls, and each costs seconds on the HTP emulator (SmolLM2-135M: 12-14 s).
        # With a prefix token, each point starts with it (as every prompt does) and the program reads the rest.
        first = int(c.static.prefix_token is not None)
        one, chunk = 1 + first, min(c.static.prefill + first, c.static.context)
        points = [{"seq": one}, {"seq": chunk}] if chunk > one else [{"seq": one}]
    elif is_decoder(c.spec):
        points = with_short_prompt(points, c.spec, c.dims)
    data = _task_data(c.project, c.r, c.spec, c.dims, c.inputs)
    task_tolerances: dict[str, Any] = {}
    if data is not None and data.measure == "top1":
        task_tolerances = {"min_top1": tol.min_top1}
    elif data is not None:
        task_tolerances = {"min_topk_overlap": tol.min_topk_overlap if tol.min_topk_overlap is not None
                           else tol.min_top1}
    return Verify(
        run=run, reason=reason, points=points, inputs=tol.inputs or _inputs_per_point(points, text),
        min_cosine=tol.min_cosine if text is None or "min_cosine" in tol.explicit else NOT_JUDGED_COSINE,
        min_sqnr_db=tol.min_sqnr_db if text is None or "min_sqnr_db" in tol.explicit else NOT_JUDGED_SQNR,
        max_abs=tol.max_abs, generate=generate, min_tokens=tol.tokens or 0, arm64_cpu=arm64_cpu,
        host_reference=backend.host_reference if run and not c.toolchain.runs[c.unit.backend].usable else "",
        int8_only=c.unit.int8_only and not tol.allow_float_ops,
        **({"max_perplexity_ratio": tol.max_perplexity_ratio, "max_kl": tol.max_kl, "min_top1": tol.min_top1}
           if text is not None else {}), data=data, **task_tolerances)


def _budget_step(c: _Candidate) -> CheckBudget:
    params = c.spec.params
    estimate = params * SCHEMES[c.recipe.scheme].weight_bits // 8 if params is not None else None
    return CheckBudget(limits=_budget_limits(c.r.profile.profile.budgets, c.unit), estimate_bytes=estimate)


def _package_step(c: _Candidate) -> Package:
    spec, backend = c.spec, c.backend
    return Package(file=layout.program_file(c.r.model, backend.format), format=backend.format, task=spec.task,
                   data_file=layout.program_data_file(c.r.model) if spec.weights == "external" else "",
                   outputs=_outputs(spec.outputs),
                   method_outputs={n: _outputs(meth.outputs) for n, meth in spec.methods.items() if meth.outputs},
                   requirements=backend.requirements(c.unit.options, c.toolchain.backends[c.unit.backend].facts))


def _keyed(steps: list[Any], toolchain: Toolchain) -> tuple[list[Any], str]:
    """Each step with its key, which folds the one before it (the first folds the tool versions and the
    compile code hash); and the program key: the serialize step's."""
    keyed = []
    previous = key_of(toolchain.versions, toolchain.code["compile"])
    program_key = ""
    for s in steps:
        previous = key_of(previous, s.model_dump(mode="json", exclude={"key"}))
        keyed.append(s.model_copy(update={"key": previous}))
        if isinstance(s, Serialize):
            program_key = previous
    return keyed, program_key


def _candidate_plan(project: Project, r: ResolvedModel, unit: Unit, recipe: Recipe, toolchain: Toolchain,
                    inputs: _Inputs) -> UnitPlan:
    """The plan of one scheme of one model on one unit: its eight steps, keyed."""
    c = _candidate(project, r, unit, recipe, toolchain, inputs)
    load = _load_step(c)
    generate = _generated_tokens(c.spec, c.dims)
    text, text_reason = _held_out(project, r, c.spec, c.dims, generate, inputs)
    export, verify = _export_step(c, text, text_reason), _verify_step(c, text, generate)
    if c.static is not None:
        export, verify = _within_budget(c, export, verify, generate)
    elif verify.arm64_cpu:
        verify = _arm64_within_budget(c, export, verify)
    calibration = _calibration_text(c, export.text)
    # Ranges calibrated on text are not widened: the text covers what the app feeds, and the bit matters
    # (SmolLM2 in 16a8w, simulated: KL 0.053 widened, 0.022 not; docs/qnn.md).
    recipe = c.recipe.model_copy(update={"widen_ranges": False}) if calibration is not None else c.recipe
    steps, program_key = _keyed([
        load, export,
        Quantize(recipe=recipe, description=c.backend.describe(recipe, unit.options), text=calibration),
        _lower_step(c), Serialize(external_weights=c.spec.weights == "external"), verify,
        _budget_step(c), _package_step(c)], toolchain)
    doc, base = project.doc, ("models", r.model)
    outputs_at = {"forward": doc.locate((*base, "outputs")),
                  **{n: doc.locate((*base, "methods", n, "outputs")) for n in c.spec.methods}}
    return UnitPlan(model=r.model, target=r.target, unit=unit.name, backend=unit.backend,
                    quantization=c.recipe.scheme, program_key=program_key, threads=unit.threads,
                    warmup=unit.warmup, steps=steps, skipped=[], outputs_at=outputs_at,
                    dims_at=_dims_at(project, r), weights=_weights(c) if is_decoder(c.spec) else c.spec.params)


def _within_budget(c: _Candidate, export: Export, verify: Verify, generate: int) -> tuple[Export, Verify]:
    """A static decoder verified on an emulator (seconds a call): its greedy prompts cut to what fits the budget
    by the plan's estimate (at least one; the points and held-out windows always), budget and estimate recorded.
    Unchanged where it is not run, or no weight count to estimate from is known (a factory without `params`)."""
    context = c.spec.constants["max_seq_len"]
    assert isinstance(context, int), context  # a decoder's
    j = static_checks.judged(export, verify, context)
    weights = _weights(c)
    if j is None or weights is None:
        return export, verify
    budget = c.r.tolerances.seconds or static_checks.DEFAULT_BUDGET_S
    n = static_checks.fitting_prompts(j, weights, budget)
    if n < len(j.prompts):
        verify = verify.model_copy(update={"prompts": n})
        if export.text is not None:
            text, _ = _held_out(c.project, c.r, c.spec, c.dims, generate, c.inputs, prompts=n)
            export = export.model_copy(update={"text": text})
        j = static_checks.judged(export, verify, context)
        assert j is not None
    return export, verify.model_copy(update={"budget_s": budget,
                                             "estimate_s": round(static_checks.estimate_s(j.calls(), weights), 1)})


def _arm64_within_budget(c: _Candidate, export: Export, verify: Verify) -> Verify:
    """A decoder's arm64 check: the verification points it runs within the budget by the plan's estimate,
    budget and estimate recorded. Unchanged (every point) for other models, or without a weight count."""
    weights = _weights(c) if is_decoder(c.spec) else None
    tokens = next((i for i in export.inputs if i.name == "tokens"), None)
    if weights is None or tokens is None or not isinstance(tokens.shape[-1], str):
        return verify
    budget = c.r.tolerances.seconds or arm64_checks.DEFAULT_BUDGET_S
    positions = 0
    if export.text is not None:
        logits = next(iter(c.spec.outputs.values())).shape if c.spec.outputs else []
        vocab = logits[-1] if logits and isinstance(logits[-1], int) else 0
        positions = arm64_checks.text_positions(vocab, sum(len(w) - 1 for w in export.text.windows))
    fit = arm64_checks.fitting(verify.points, tokens.shape[-1], positions, weights, budget)
    return verify.model_copy(update={"arm64_points": fit.run, "budget_s": budget, "estimate_s": fit.estimate_s})


def _weights(c: _Candidate) -> int | None:
    """The decoder's weight count: its config's (a Hugging Face directory or GGUF file), else the manifest's
    `params`."""
    if c.spec.source.factory is not None:
        return c.spec.params
    return hf_directory.decoder_parameters(hf_directory.source_model(c.spec.source, c.project.folder).config)


def is_decoder(spec: ModelSpec) -> bool:
    """A model with the interface of deployc's decoder programs, which the generate stage drives."""
    return spec.task == "text-generation" and list(spec.inputs) == ["tokens", "input_pos"] and not spec.methods


def _generated_tokens(spec: ModelSpec, dims: list[DimPlan]) -> int:
    """Token parity is checked on programs with the decoder interface the generate stage drives, where a
    call may take one token (decoding)."""
    seq = next((d for d in dims if d.name == "seq"), None)
    if (is_decoder(spec) and seq is not None and seq.min == 1
            and isinstance(context := spec.constants.get("max_seq_len"), int)):
        return max(0, min(GENERATION_TOKENS, context - 1))
    return 0


def _task_data(project: Project, r: ResolvedModel, spec: ModelSpec, dims: list[DimPlan],
               inputs: _Inputs) -> TaskData | None:
    """The manifest's task-measure samples, checked against the model's inputs (a located error if they
    do not fit), hashed into the verification's key."""
    file = r.tolerances.data
    if file is None:
        return None
    override = spec.overrides.get(r.target)
    base: tuple[str, ...] = (("models", r.model, "overrides", r.target) if override and override.verify
                             and override.verify.data is not None else ("models", r.model))
    at, field = project.doc.locate((*base, "verify", "data")), ".".join((*base, "verify", "data"))
    measure = task_data.TASK_MEASURES.get(spec.task)
    if measure is None:
        raise PlanError([Diagnostic(at, f"{field}: task '{spec.task}' has no task measure to compute on data",
                                    "classifiers (" + ", ".join(t for t, m in task_data.TASK_MEASURES.items()
                                                                if m == "top1")
                                    + ") get top-1 agreement, embedders ("
                                    + ", ".join(t for t, m in task_data.TASK_MEASURES.items() if m == "topk")
                                    + ") top-k neighbour overlap: set the model's task")])
    path = project.folder / file
    samples, problem = task_data.check(path, _inputs(spec.inputs), dims, measure)
    if problem:
        raise PlanError([Diagnostic(at, f"{field}: {file}: {problem}")])
    return TaskData(file=file, sha256=inputs.add(path, "verification data"), samples=samples,
                    measure=measure, topk=r.tolerances.topk)


def _held_out(project: Project, r: ResolvedModel, spec: ModelSpec, dims: list[DimPlan], generate: int,
              inputs: _Inputs, prompts: int = heldout.PROMPTS) -> tuple[HeldOutText | None, str]:
    """The held-out text of a decoder (its ids and where they come from), or why it has none."""
    if not generate:
        return None, ""
    tokenizer = heldout.model_tokenizer(project, r.model)
    if tokenizer.path is None:
        return None, tokenizer.described
    given = r.tolerances.text
    file = project.folder / given if given else heldout.DEFAULT_SAMPLE
    sha = inputs.add(file, "held-out text")
    inputs.add(tokenizer.path, "tokenizer")
    ids = inputs.text_ids(file, tokenizer.path)
    context = spec.constants["max_seq_len"]
    assert isinstance(context, int), context  # _generated_tokens is 0 otherwise
    doc, base = project.doc, ("models", r.model)
    overridden = ((doc.data["models"][r.model].get("overrides") or {}).get(r.target) or {}).get("verify") or {}
    path = (*base, "overrides", r.target, "verify", "text") if "text" in overridden else (*base, "verify", "text")
    named = given or heldout.SAMPLE_NAME
    if len(ids) < heldout.needed(context):
        raise PlanError([Diagnostic(doc.locate(path if given else base),
                                    f"{'.'.join(path)}: {named} gives {len(ids)} tokens with {tokenizer.described}; "
                                    f"verifying a decoder takes at least {heldout.needed(context)} "
                                    f"({heldout.WINDOWS} windows of {heldout.window_length(context)} and the next "
                                    "token)", "use a longer held-out text")])
    vocab = spec.constants.get("vocab_size")
    if isinstance(vocab, int) and max(ids) >= vocab:
        raise PlanError([Diagnostic(doc.locate(base), f"models.{r.model}: {tokenizer.described} gives token id "
                                    f"{max(ids)} for {named}, beyond the model's vocab_size {vocab}: the tokenizer is "
                                    "not this model's", "use the tokenizer the model was trained with")])
    seq = next(d for d in dims if d.name == "seq")
    bos = spec.constants.get("bos_id")
    return heldout.held_out(ids, bos if isinstance(bos, int) else None, context, seq.max, generate,
                            given or heldout.SAMPLE_NAME, sha, tokenizer.described, prompts), ""


def _calibration_text(c: _Candidate, judged: HeldOutText | None) -> CalibrationText | None:
    """What a calibrated decoder's quantizer observes: the manifest's calibration text or deployc's sample,
    tokenized, quoting no run of words of the text it is judged on. None: a scheme without calibration, or a
    decoder with no tokenizer (calibrated on seeded token ids, as the plan says)."""
    recipe, project, r = c.recipe, c.project, c.r
    given = recipe.calibration_text
    if not recipe.calibration_samples or not is_decoder(c.spec):
        return None
    quant_path: tuple[str | int, ...] = tuple(r.quantization_field.split("."))
    doc, path = project.doc, (*quant_path, "calibration", "text")
    field = ".".join(map(str, path))
    tokenizer = heldout.model_tokenizer(project, r.model)
    if tokenizer.path is None:
        if given:
            raise PlanError([Diagnostic(doc.locate(path), f"{field}: {tokenizer.described}",
                                        "give the model a tokenizer, or leave calibration.text out (seeded ids)")])
        return None
    file = project.folder / given if given else calibration_text.DEFAULT_SAMPLE
    named = given or calibration_text.SAMPLE_NAME
    sha = c.inputs.add(file, "calibration text")
    if judged is not None and sha == judged.sha256:
        raise PlanError([Diagnostic(doc.locate(path), f"{field}: {named} is the held-out text the program is judged "
                                    "on: its figures would be measured on what the quantizer saw",
                                    "calibrate on other text from the same domain")])
    judged_file = project.folder / r.tolerances.text if r.tolerances.text else heldout.DEFAULT_SAMPLE
    run = (calibration_text.shared_run(file.read_text(encoding="utf-8"), judged_file.read_text(encoding="utf-8"))
           if judged is not None else None)
    if judged is not None and run is not None:
        raise PlanError([Diagnostic(doc.locate(path if given else quant_path),
                                    f"{field}: {named} shares {calibration_text.SHARED_WORDS} words in a row with the "
                                    f"held-out text {judged.file} (\"{run}\"): the program would be judged on text "
                                    "the quantizer saw", "calibrate on text the held-out text does not quote")])
    ids = c.inputs.text_ids(file, tokenizer.path)
    context = c.spec.constants["max_seq_len"]
    assert isinstance(context, int), context  # a decoder's
    bos = c.spec.constants.get("bos_id")
    bos = bos if isinstance(bos, int) else None
    samples = recipe.calibration_samples
    if len(ids) < calibration_text.needed(context, samples, bos):
        raise PlanError([Diagnostic(doc.locate(path if given else quant_path),
                                    f"{field}: {named} gives {len(ids)} tokens with {tokenizer.described}; "
                                    f"{samples} calibration samples of {calibration_text.sequence_length(context)} "
                                    f"tokens take {calibration_text.needed(context, samples, bos)}",
                                    "use a longer text, or fewer calibration.samples")])
    vocab = c.spec.constants.get("vocab_size")
    if isinstance(vocab, int) and max(ids) >= vocab:
        raise PlanError([Diagnostic(doc.locate(path if given else ("models", r.model)),
                                    f"{field}: {tokenizer.described} gives token id {max(ids)} for {named}, beyond "
                                    f"the model's vocab_size {vocab}: the tokenizer is not this model's",
                                    "use the tokenizer the model was trained with")])
    text = calibration_text.calibration_text(ids, bos, context, samples, named, sha, tokenizer.described)
    return text


def _context(spec: ModelSpec) -> int | None:
    if spec.source.factory is not None or spec.task != "text-generation":
        return None
    context = spec.constants["max_seq_len"]  # derived from the directory when left out
    assert isinstance(context, int), context
    return context


def _dims_at(project: Project, r: ResolvedModel) -> dict[str, Declared]:
    """Each dim's declaration on this target: its override, the model's entry, or (derived from a Hugging
    Face config) the model itself."""
    doc, raw = project.doc, project.doc.data["models"][r.model]
    overridden = ((raw.get("overrides") or {}).get(r.target) or {}).get("dims") or {}
    out = {}
    for name in r.dims:
        if name in overridden:
            path: tuple[str, ...] = ("models", r.model, "overrides", r.target, "dims", name)
        elif name in (raw.get("dims") or {}):
            path = ("models", r.model, "dims", name)
        else:
            out[name] = Declared(at=doc.locate(("models", r.model)), field=f"models.{r.model}.dims.{name}")
            continue
        out[name] = Declared(at=doc.locate(path), field=".".join(path))
    return out


def _token_length(unit: UnitPlan) -> tuple[int, bool]:
    """(the most tokens the model's first input takes on this unit, whether it takes exactly that many)."""
    first = unit.export.inputs[0]
    dims = {d.name: d for d in unit.export.dims}
    symbolic = [dims[d] for d in first.shape if isinstance(d, str)]
    if not symbolic:
        return int(first.shape[-1]), True
    return min(d.max for d in symbolic), all(d.min == d.max for d in symbolic)


# The program an index with `embed_with: reference` is embedded by: the same model, fp32, on this host's
# XNNPACK (a fast program of the same weights), never shipped.
HOST_REFERENCE = Unit(name="host_reference", backend="xnnpack", quantization=["fp32"],
                      device=Device(soc="x86-64", os="linux", abi="x86_64", name="the build host"))


def reference_unit(project: Project, r: ResolvedModel, toolchain: Toolchain, inputs: _Inputs) -> UnitPlan:
    """The host reference program of a model on a target: its dims (a static NPU length stays static, so
    chunks are padded alike), fp32 and its tolerances, XNNPACK; verified against eager like any program."""
    candidate = dataclasses.replace(r.with_scheme("fp32"), npu=None)
    recipe = BACKENDS["xnnpack"].recipe(candidate.quantization)
    assert recipe is not None  # xnnpack builds fp32
    return _candidate_plan(project, candidate, HOST_REFERENCE, recipe, toolchain, inputs)


def embedder_key(u: UnitPlan) -> str:
    """What decides which program embeds an index: the unit's program, or, where the build may take
    another (a choice of schemes, fallback units), every program it may take and the rule."""
    if u.choice is None and not u.fallbacks:
        return u.program_key
    groups = [u, *u.fallbacks]
    return key_of([[g.program_key, *(c.program_key for c in g.candidates),
                    g.choice.model_dump(mode="json") if g.choice else None] for g in groups])


def _assets(project: Project, units: list[UnitPlan], inputs: _Inputs,
            reference: Callable[[str], UnitPlan]) -> list[Any]:
    """The pipeline's tokenizer files and vector indexes for one target; `reference(model)`: the host
    reference program of a model (an index with `embed_with: reference`)."""
    pipeline = project.manifest.pipeline
    if pipeline is None:
        return []
    folder = project.folder
    found = {name: tokenizer_file(t, folder) for name, t in pipeline.tokenizers.items()}
    shas = {name: inputs.add(path, "tokenizer") for name, path in found.items() if path is not None}
    out: list[Any] = [TokenizerAssetPlan(name=name,
                                         file=layout.tokenizer_file(name, pipeline.tokenizers[name].is_sentencepiece()),
                                         source=pipeline.tokenizers[name], sha256=sha)
                      for name, sha in sorted(shas.items())]
    for stage in pipeline.stages:
        for file in op_of(stage).files(stage, folder):
            inputs.add(file, "preprocessor")
    by_model = {u.model: u for u in units}
    for name, ix in sorted(pipeline.indexes.items()):
        unit = by_model[ix.model]
        files, _ = corpus_files(ix, folder)
        corpus = [SourceFile(path=f.relative_to(folder).as_posix(), sha256=inputs.add(f, "corpus")) for f in files]
        if ix.image is not None:  # an image corpus: one vector per image, prepared as the image stage says
            stage = next(s for s in pipeline.stages if s.name == ix.image)
            assert isinstance(stage, image.ImageStage)  # validate checked it
            plan = IndexAssetPlan(name=name, file=layout.index_file(name), model=ix.model,
                                  program_key=embedder_key(unit), image_steps=image.resolve_steps(stage, folder)[0],
                                  corpus=corpus)
        else:
            assert ix.tokenizer is not None
            max_tokens, static = _token_length(unit)
            plan = IndexAssetPlan(
                name=name, file=layout.index_file(name), model=ix.model, program_key=embedder_key(unit),
                tokenizer=ix.tokenizer, tokenizer_sha256=shas[ix.tokenizer], max_tokens=max_tokens,
                pad_to=max_tokens if static else None, words=ix.chunking.words, overlap=ix.chunking.overlap,
                corpus=corpus)
        if ix.embed_with == "reference":
            plan = plan.model_copy(update={"reference": reference(ix.model), "agreement": ix.agreement})
        if ix.queries is not None:
            queries, _ = index_queries(ix.queries, folder)  # validate checked it
            inputs.add(folder / ix.queries.file, "queries")
            plan = plan.model_copy(update={"queries": IndexQueryCheck(
                file=ix.queries.file, queries=queries, topk=ix.queries.topk,
                min_topk_overlap=ix.queries.min_topk_overlap, eager=unit.load)})
        out.append(plan.model_copy(update={"key": key_of(plan.model_dump(mode="json",
                                                                         exclude={"key", "name", "file"}))}))
    return out


def _content(u: UnitPlan, up_to: str = "package") -> list[dict[str, Any]]:
    """The unit's steps as the manifest and profile make them: keys and code hashes (which fold the
    toolchain) and descriptions left out."""
    steps = [s.model_dump(mode="json", exclude=set(NOT_CONTENT)) for s in u.steps]
    return steps[:STEP_ORDER.index(up_to) + 1]


def program_content_key(u: UnitPlan) -> str:
    """What decides a program's bytes, but for tool versions and deployc's code."""
    return key_of(_content(u, "serialize"))


def shipped_content_key(u: UnitPlan) -> str:
    """The content key of the program a unit ships: with a choice of schemes, the choice rule and every
    candidate's content decide which one it is."""
    if u.choice is None:
        return program_content_key(u)
    return key_of(u.choice.model_dump(mode="json"), [program_content_key(c) for c in (u, *u.candidates)])


def _bundle(project: Project, target: str, profile: str, device: dict[str, str], units: list[UnitPlan],
            assets: list[Any], pipeline: Any) -> BundlePlan:
    m = project.manifest
    content = {u.package.file: shipped_content_key(u) for u in units}
    content.update({u.package.data_file: shipped_content_key(u) for u in units if u.package.data_file})
    # Self-test vectors are the program's verification points (from its dims) and eager outputs: the
    # program's content decides them, its tolerances do not.
    content.update({layout.self_test_file(u.model): shipped_content_key(u) for u in units})
    by_model = {u.model: content[u.package.file] for u in units}
    for a in assets:
        if isinstance(a, TokenizerAssetPlan):
            content[a.file] = a.sha256
        else:
            # A host reference program's content, not its keys (they fold tool versions)
            reference = program_content_key(a.reference) if a.reference is not None else None
            index = key_of(a.model_dump(mode="json", exclude={"key", "name", "file", "program_key", "reference"}),
                           by_model[a.model], reference)
            content[a.file] = content[layout.index_vectors_file(a.file)] = index
    described = [{"model": u.model, "unit": u.unit, "backend": u.backend, "quantization": u.quantization,
                  "threads": u.threads, "warmup": u.warmup, "steps": _content(u),
                  **({"choice": u.choice.model_dump(mode="json"), "candidates": [_content(c) for c in u.candidates]}
                     if u.choice else {})} for u in units]
    bundle_key = key_of({"bundle": {"name": m.name, "version": m.version, "target": target, "profile": profile},
                         "device": device, "files": content, "units": described,
                         "pipeline": pipeline.model_dump(mode="json") if pipeline else None})
    return BundlePlan(dir=layout.bundle_dir(m.name, m.version, profile),
                      archive=layout.archive_file(m.name, m.version, profile),
                      bundle_key=bundle_key, content_keys=dict(sorted(content.items())))


def _input_order(f: HashedFile) -> tuple[str, str, str, str]:
    """By role, file name, then content: whole paths sort differently on another checkout (a venv outside it)."""
    return f.role, PurePath(f.path).name, f.sha256, f.path


def make_plan(project: Project, toolchain: Toolchain, only_target: str | None = None,
              hashes: FileHashes | None = None) -> BuildPlan:
    """`hashes`: where large files' sha256 are remembered (the command's cache directory); None: nowhere."""
    m = project.manifest
    if only_target is not None and only_target not in m.targets:
        raise PlanError([Diagnostic(project.doc.locate(("targets",)),
                                    f"--target {only_target}: not one of this manifest's targets: "
                                    f"{', '.join(m.targets)}")])
    inputs = _Inputs(hashes or FileHashes(None))
    manifest_sha = inputs.add(project.path, "manifest", project.doc.sha256)
    problems: list[Diagnostic] = []
    by_target: dict[str, list[UnitPlan]] = {t: [] for t in m.targets if only_target in (None, t)}
    resolved: dict[tuple[str, str], ResolvedModel] = {}
    for r in resolve(project):
        if r.target not in by_target:
            continue
        resolved[(r.target, r.model)] = r
        try:
            by_target[r.target].append(_model_plan(project, r, toolchain, inputs))
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
        for f in loaded.files:
            inputs.add(f, "profile")
        p = loaded.profile
        device = p.device.model_dump(exclude_defaults=True)
        def reference(model: str, target: str = t) -> UnitPlan:
            return reference_unit(project, resolved[(target, model)], toolchain, inputs)

        assets = _assets(project, units, inputs, reference)
        pipeline = pipeline_config(m, project.folder, {u.model: length for u in units
                                                       for length, static in [_token_length(u)] if static},
                                   {u.model: u.export.static.context for u in units if u.export.static})
        targets.append(TargetPlan(target=t, profile=p.name, profile_key=key_of(p.model_dump(mode="json")),
                                  device=device, units=units, assets=assets, pipeline=pipeline,
                                  bundle=_bundle(project, t, p.name, device, units, assets, pipeline)))
    return BuildPlan(
        manifest=ManifestRef(name=m.name, version=m.version, file=project.path.name,
                             folder=str(project.folder.resolve()), sha256=manifest_sha,
                             version_at=project.doc.locate(("version",))),
        toolchain=toolchain, targets=targets, inputs=sorted(inputs.files.values(), key=_input_order))
