"""Load a manifest and every profile it names, reporting all problems at once. No torch."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from deployc.core.diagnostics import closest
from deployc.core.errors import Diagnostic, UserError
from deployc.core.yaml_io import Document, load_file, load_text
from deployc.load import hf_directory
from deployc.load.manifest import (
    DimSpec,
    InputSpec,
    Manifest,
    ModelSpec,
    OutputSpec,
    check_references,
    parse_manifest,
)
from deployc.load.model_sources import find_module_file, module_roots
from deployc.load.paths import check_paths, verify_places
from deployc.pipeline.checks import check_pipeline
from deployc.targets.profile import LoadedProfile, load_profile, search_path


@dataclass(frozen=True)
class Project:
    path: Path
    manifest: Manifest  # with what Hugging Face sources imply filled in (inputs, outputs, dims)
    doc: Document
    profiles: dict[str, LoadedProfile]  # keyed by the manifest's target reference
    derived: dict[str, tuple[str, ...]] = field(default_factory=dict)  # model -> fields taken from its directory
    architectures: dict[str, str] = field(default_factory=dict)  # model -> its directory's model_type

    @property
    def folder(self) -> Path:
        return self.path.parent


def _check_sources(m: Manifest, doc: Document, folder: Path) -> list[Diagnostic]:
    out: list[Diagnostic] = []
    roots = module_roots(folder)
    for name, model in m.models.items():
        module = model.source.factory.split(":")[0] if model.source.factory else None
        if module is not None and find_module_file(module, roots) is None:
            out.append(Diagnostic(doc.locate(("models", name, "source", "factory")),
                                  f"models.{name}.source.factory: module '{module}' not found in {folder} "
                                  "or on the Python path"))
        for q_path, q in [(("quantization",), model.quantization)] + [
                (("overrides", t, "quantization"), o.quantization) for t, o in model.overrides.items()]:
            data = q.calibration.dataset if q is not None and q.calibration else None
            if data and (Path(data).is_absolute() or ".." in Path(data).parts or not (folder / data).is_file()):
                path = ("models", name, *q_path, "calibration", "dataset")
                out.append(Diagnostic(doc.locate(path), f"{'.'.join(map(str, path))}: no file {data} inside the "
                                                        "manifest's folder"))
            text = q.calibration.text if q is not None and q.calibration else None
            problem = _text_problem(folder / text) if text else None
            if text and problem:
                path = ("models", name, *q_path, "calibration", "text")
                out.append(Diagnostic(doc.locate(path), f"{'.'.join(map(str, path))}: {text} {problem}",
                                      "name a UTF-8 text file from the model's domain, apart from verify.text"))
        for path, v in verify_places(name, model):
            if v.text is not None:
                problem = _text_problem(folder / v.text)
                if problem:
                    out.append(Diagnostic(doc.locate((*path, "text")), f"{'.'.join(path)}.text: {v.text} {problem}",
                                          "name a UTF-8 text file held out from the model's training"))
        ckpt = model.source.checkpoint
        if ckpt is not None and not (folder / ckpt.path).is_file():
            out.append(Diagnostic(doc.locate(("models", name, "source", "checkpoint", "path")),
                                  f"models.{name}.source.checkpoint.path: no file {ckpt.path} next to the manifest"))
    return out


def _text_problem(path: Path) -> str | None:
    """Why a held-out or calibration text cannot be read; its length in tokens is the plan's to check."""
    if not path.is_file():
        return "is not a file next to the manifest"
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        return f"is not UTF-8 (byte {exc.start}: {exc.reason})"
    if not text.strip():
        return "is empty"
    return None


def _check_pins(m: Manifest, doc: Document, profiles: dict[str, LoadedProfile]) -> list[Diagnostic]:
    out: list[Diagnostic] = []
    for name, model in m.models.items():
        for target, ov in model.overrides.items():
            if ov.unit is None or target not in profiles:
                continue
            units = [u.name for u in profiles[target].profile.units]
            if ov.unit not in units:
                out.append(Diagnostic(doc.locate(("models", name, "overrides", target, "unit")),
                                      f"models.{name}.overrides.{target}.unit: profile '{target}' has no unit "
                                      f"'{ov.unit}'",
                                      closest(ov.unit, units) or f"its units: {', '.join(units)}"))
    return out


def _load_profiles(refs: list[str], doc: Document, folder: Path, env: Mapping[str, str] | None,
                   problems: list[Diagnostic]) -> dict[str, LoadedProfile]:
    dirs = search_path(folder, env)
    profiles: dict[str, LoadedProfile] = {}
    for i, ref in enumerate(refs):
        if not isinstance(ref, str) or ref in profiles:
            continue
        where = Diagnostic(doc.locate(("targets", i)), f"targets[{i}]")
        try:
            profiles[ref] = load_profile(ref, folder, dirs, where)
        except UserError as exc:
            problems.extend(exc.diagnostics)
    return profiles


def _from_directories(m: Manifest, doc: Document, folder: Path, problems: list[Diagnostic], unreadable: set[str]
                      ) -> tuple[Manifest, dict[str, tuple[str, ...]], dict[str, str]]:
    """The manifest with what each Hugging Face or GGUF source's config implies for the fields left out; the
    fields taken, and each directory's model_type, by model. Models whose source gives nothing go into
    `unreadable`."""
    models = dict(m.models)
    derived: dict[str, tuple[str, ...]] = {}
    architectures: dict[str, str] = {}
    for name, spec in m.models.items():
        kind = "gguf" if spec.source.gguf is not None else "huggingface" if spec.source.huggingface else None
        if kind is None:
            continue
        at = doc.locate(("models", name, "source", kind))
        if spec.task not in hf_directory.TASKS or (kind == "gguf" and spec.task != "text-generation"):
            unreadable.add(name)
            if kind == "gguf":  # the manifest's own rule says what a GGUF source takes
                continue
            problems.append(Diagnostic(doc.locate(("models", name, "task")) if "task" in doc.data["models"][name]
                                       else at, f"models.{name}.task: a Hugging Face source needs a task, one of "
                                                f"{', '.join(hf_directory.TASKS)}; got {spec.task}"))
            continue
        try:
            directory = hf_directory.source_model(spec.source, folder)
            implied = hf_directory.derive(directory, spec.task)
        except hf_directory.HfProblem as exc:
            unreadable.add(name)
            problems.append(Diagnostic(at, f"models.{name}.source.{kind}: {exc}"))
            continue
        architectures[name] = directory.model_type
        if spec.inputs and list(spec.inputs) != list(implied["inputs"]):
            problems.append(Diagnostic(doc.locate(("models", name, "inputs")), f"models.{name}.inputs: a Hugging "
                                       f"Face {spec.task} model takes {', '.join(implied['inputs'])} (in this order); "
                                       f"got {', '.join(spec.inputs)}", "keep the names; shapes, ranges and dims "
                                       "may change"))
            continue
        update: dict[str, object] = {}
        dims = dict(spec.dims)
        if not spec.inputs:
            update["inputs"] = {k: InputSpec.model_validate(v) for k, v in implied["inputs"].items()}
            dims = {**{k: DimSpec.model_validate(v) for k, v in implied["dims"].items()}, **spec.dims}
            update["dims"] = dims
        if not spec.outputs:
            update["outputs"] = {k: OutputSpec.model_validate(v) for k, v in implied["outputs"].items()}
        if "constants" in implied:  # a decoder: its token ids and context, each unless the manifest sets it
            constants = {**implied["constants"], **spec.constants}
            if "seq" in dims and "seq" not in spec.dims and "max_seq_len" in spec.constants:
                declared = _int(spec.constants["max_seq_len"])
                dims["seq"] = dims["seq"].model_copy(update={"max": min(dims["seq"].max, declared)})
                update["dims"] = dims
            elif "seq" in dims and "max_seq_len" not in spec.constants:
                constants["max_seq_len"] = dims["seq"].max  # the KV cache holds as many positions as seq allows
            if constants != spec.constants:
                update["constants"] = constants
            problems.extend(_beyond_context(name, spec, constants["max_seq_len"], doc))
            tokenizer = hf_directory.tokenizer_file(directory.folder)
            size = hf_directory.tokenizer_size(tokenizer) if tokenizer is not None else None
            vocab = constants.get("vocab_size")
            if size is not None and isinstance(vocab, int) and size > vocab:
                what = (f"{spec.source.huggingface}/tokenizer.json gives {size} token ids but config.json's "
                        if kind == "huggingface" else f"its tokenizer gives {size} token ids but its ")
                problems.append(Diagnostic(at, f"models.{name}.source.{kind}: {what}vocab_size is {vocab}: the "
                                           "tokenizer is not this model's", "save the tokenizer the model was "
                                           "trained with"))
        if update:
            models[name] = spec.model_copy(update=update)
            derived[name] = tuple(sorted(update))
    return m.model_copy(update={"models": models}), derived, architectures


def _int(value: object) -> int:
    """A constant the schema allows to be any number or list, where an integer is meant (max_seq_len)."""
    assert isinstance(value, int), value
    return value


def _beyond_context(name: str, spec: ModelSpec, context: int, doc: Document) -> list[Diagnostic]:
    """A decoder's seq dim, anywhere, must fit in its KV cache."""
    found = []
    places = [(("models", name, "dims", "seq"), spec.dims.get("seq"))] + [
        (("models", name, "overrides", target, "dims", "seq"), o.dims.get("seq"))
        for target, o in spec.overrides.items()]
    for path, dim in places:
        if dim is not None and dim.max > context:
            found.append(Diagnostic(doc.locate(path), f"{'.'.join(path)}: max {dim.max} is beyond the KV cache of "
                                    f"constants.max_seq_len {context} positions",
                                    f"lower it to {context} or raise constants.max_seq_len"))
    return found


def _follows(problem: Diagnostic, unreadable: set[str], m: Manifest) -> bool:
    """A problem that only follows from a model source deployc could not read (the inputs, dims and constants
    it would have given): the source's own error says what to fix."""
    field = problem.message.split(":")[0]
    if any(field.startswith(f"models.{name}.") and field.split(".")[2] not in ("source", "task")
           for name in unreadable):
        return True
    stage = re.match(r"^pipeline\.stages\[(\d+)\]\.model$", field)
    if stage and m.pipeline is not None and int(stage.group(1)) < len(m.pipeline.stages):
        return getattr(m.pipeline.stages[int(stage.group(1))], "model", None) in unreadable
    return False


def _sorted(problems: list[Diagnostic]) -> list[Diagnostic]:
    return sorted(problems, key=lambda d: (d.location, d.message))


def load_project(path: Path, env: Mapping[str, str] | None = None, text: str | None = None) -> Project:
    """`text`: the manifest's content, when it is not (yet) the file at `path` (deployc init plans what it will
    write); `path` still locates its folder and its errors."""
    doc = load_file(path) if text is None else load_text(text, path)
    folder = path.parent
    try:
        manifest = parse_manifest(doc)
    except UserError as exc:
        # Report broken profiles in the same run, as long as the target list itself is readable.
        problems = list(exc.diagnostics)
        refs = doc.data.get("targets")
        if isinstance(refs, list):
            _load_profiles(refs, doc, folder, env, problems)
        raise UserError(_sorted(problems)) from None
    paths = check_paths(manifest, doc)
    if paths:  # nothing is looked up on disk through a path the file system would refuse
        raise UserError(_sorted(paths))
    problems = []
    unreadable: set[str] = set()
    manifest, derived, architectures = _from_directories(manifest, doc, folder, problems, unreadable)
    problems.extend(check_references(manifest, doc))
    profiles = _load_profiles(manifest.targets, doc, folder, env, problems)
    problems.extend(_check_sources(manifest, doc, folder))
    problems.extend(_check_pins(manifest, doc, profiles))
    problems.extend(check_pipeline(manifest, doc, folder))
    if problems:
        raise UserError(_sorted([p for p in problems if not _follows(p, unreadable, manifest)]))
    return Project(path, manifest, doc, profiles, derived, architectures)
