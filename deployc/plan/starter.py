"""A starter manifest for a Hugging Face model directory or a GGUF file (`deployc init`): the model, its
task, the inputs and dims its config implies, a scheme every target accepts (checked by planning it, so the manifest
validates and plans as written), and for text models a tokenize -> model pipeline over the directory's
tokenizer. Imports no torch: it plans, it does not build."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import yaml

from deployc.core.atomic import write_atomic
from deployc.core.errors import UsageError, UserError
from deployc.core.records import API_VERSION
from deployc.load import hf_directory
from deployc.load.hf_directory import HfModel, HfProblem
from deployc.load.project import load_project
from deployc.plan.planner import make_plan
from deployc.plan.toolchain import Toolchain

# Tried in this order; the first one that plans on the most targets becomes the model's scheme, and a
# target that does not take it gets the first one it does take as an override. Dynamic 8-bit weights
# first: no calibration data needed, and it keeps a transformer's accuracy.
SCHEME_ORDER = ("8da8w", "w8a8", "fp32", "fp16", "16a8w", "8da4w", "16a4w")
# Convolutional families: static int8 (w8a8) also quantizes their convolutions, 8da8w only linears.
_CONV_FAMILIES = {"resnet", "mobilenet_v1", "mobilenet_v2", "efficientnet", "convnext", "convnextv2", "regnet",
                  "mobilevit", "levit", "poolformer", "van", "bit"}

# The class name's suffix -> the task, for the heads that say what they do.
_HEADS = (("ForSequenceClassification", "text-classification"),
          ("ForImageClassificationWithTeacher", "image-classification"),
          ("ForImageClassification", "image-classification"), ("ForDepthEstimation", "depth-estimation"),
          ("ForObjectDetection", "object-detection"),
          ("ForCausalLM", "text-generation"), ("LMHeadModel", "text-generation"))
# Heads that are an encoder plus something deployc drops: their base model is an embedding model.
_ENCODER_HEADS = ("Model", "ForMaskedLM", "ForPreTraining", "ForTokenClassification", "ForQuestionAnswering",
                  "ForCTC", "ForMaskedImageModeling", "ForConditionalGeneration")


@dataclass(frozen=True)
class Starter:
    path: Path  # where the manifest goes
    text: str
    task: str
    schemes: dict[str, str]  # target -> the scheme it builds


def _modality(config: dict[str, Any]) -> str | None:
    if "num_mel_bins" in config or "conv_dim" in config:
        return "audio"
    if any(k in config for k in ("image_size", "num_channels", "patch_size", "hidden_sizes")):
        return "image"
    if "vocab_size" in config or isinstance(config.get("text_config"), dict):
        return "text"
    return None


def guess_task(model: HfModel) -> str:
    """The task the directory's `architectures` name; raises HfProblem when they do not say."""
    names = [a for a in model.config.get("architectures") or [] if isinstance(a, str)]
    for name in names:
        for suffix, task in _HEADS:
            if name.endswith(suffix):
                return task
    modality = _modality(model.config)
    if all(n.endswith(_ENCODER_HEADS) for n in names) and modality is not None:
        return {"text": "embedding", "image": "image-embedding", "audio": "audio-embedding"}[modality]
    said = f"architectures {names}" if names else "no architectures"
    raise HfProblem(f"config.json has {said}, which does not say the task; pass --task, one of "
                    f"{', '.join(hf_directory.TASKS)}")


def model_name(folder: Path) -> str:
    """The directory's name as a manifest model name ([a-z][a-z0-9_]*)."""
    name = re.sub(r"[^a-z0-9]+", "_", folder.resolve().name.lower()).strip("_")
    return name if name[:1].isalpha() else f"model_{name}" if name else "model"


def _flow(value: Any) -> str:
    text = yaml.safe_dump(value, default_flow_style=True, width=1 << 16, sort_keys=False)
    return text.removesuffix("\n...\n").strip()  # a plain scalar's document end marker


def _unit_line(unit: Any, static_only: bool) -> str:
    note = " [static shapes only]" if static_only else ""
    return f"{unit.name} ({unit.backend}): {', '.join(unit.quantization)}{note}"


@dataclass(frozen=True)
class _Parts:
    name: str
    source: str  # the directory, relative to the manifest
    task: str
    derived: dict[str, Any]
    tokenizer: bool
    architecture: str
    target_notes: list[str]
    file: str  # the manifest's file name
    kind: str = "huggingface"  # or gguf: the source's field

    @property
    def said(self) -> str:
        """Where the derived fields come from, in words."""
        return "config.json" if self.kind == "huggingface" else "the GGUF file's metadata"


def _render(p: _Parts, targets: list[str], scheme: str, overrides: dict[str, str]) -> str:
    seq = p.derived["dims"].get("seq")
    lines = [
        f"# A starter manifest for {p.source}, written by `deployc init`. It validates and builds as written;",
        "# edit it freely (docs/manifest.md lists every field). Build it with:",
        f"#   deployc build {p.file}",
        f"apiVersion: {API_VERSION}",
        f"name: {p.name.replace('_', '-')}",
        "version: 0.1.0",
        f"description: {_flow(f'{p.architecture} from {p.source} ({p.task})')}",
        "# Device profiles by name (deployc targets list) or by path. Their units, first choice first, and",
        "# the schemes each accepts:",
        *(f"#   {n}" for n in p.target_notes),
        f"targets: {_flow(targets)}",
        "models:",
        f"  {p.name}:",
        f"    task: {p.task}",
        f"    source: {{{p.kind}: {_flow(p.source)}}}  # "
        + ("config.json and *.safetensors, read offline" if p.kind == "huggingface"
           else "config, tokenizer and weights, read offline"),
        f"    # What {p.said} implies (deployc derives these when they are left out). Keep the input names;",
        "    # shapes, ranges and dims may change: a smaller maximum makes a smaller, faster program.",
        "    inputs:",
        *(f"      {k}: {_flow(v)}" for k, v in p.derived["inputs"].items()),
    ]
    if p.derived["dims"]:
        lines += ["    dims:", *(f"      {k}: {_flow(v)}" for k, v in p.derived["dims"].items())]
    lines += ["    outputs:", *(f"      {k}: {_flow(v)}" for k, v in p.derived["outputs"].items())]
    if "constants" in p.derived:
        ids = "config.json and generation_config.json" if p.kind == "huggingface" else p.said
        lines += [f"    # Token ids from {ids}; max_seq_len is the KV cache's length.",
                  f"    constants: {_flow(p.derived['constants'])}"]
    why = ("static int8, calibrated: quantizes the convolutions too" if scheme == "w8a8"
           else "8-bit dynamic activations, 8-bit weights: no calibration data needed" if scheme == "8da8w"
           else "4-bit grouped weights, 8-bit dynamic activations: the usual scheme for LLMs" if scheme == "8da4w"
           else "the scheme every target's units accept")
    lines.append(f"    quantization: {scheme}  # {why} (docs/manifest.md#quantization)")
    if overrides:
        lines.append("    overrides:  # targets whose units do not take the scheme above")
        lines += [f"      {t}: {{quantization: {s}}}" for t, s in overrides.items()]
    lines.append("    # verify: {min_cosine: 0.99, min_sqnr_db: 20}  "
                 "# tolerances against eager PyTorch (default: the scheme's)")
    if p.task in hf_directory.TEXT_TASKS and not p.tokenizer:
        lines.append(f"# No pipeline: {p.source} has no tokenizer.json to turn text into input_ids "
                     "(docs/pipeline.md shows one).")
    if p.tokenizer and p.task == "text-generation":
        lines += [
            f"# The app's side: a prompt in, tokenized with the {'directory' if p.kind == 'huggingface' else 'file'}'s "
            "tokenizer, greedy decoding out.",
            "pipeline:",
            "  inputs: {prompt: {type: text}}",
            "  outputs: {answer: answer.text}",
            "  tokenizers:",
            f"    tokenizer: {{{p.kind}: {_flow(p.source)}}}",
            "  stages:",
            f"    - {{name: answer, op: generate, model: {p.name}, tokenizer: tokenizer, prompt: prompt, "
            f"max_new_tokens: {min(64, p.derived['constants']['max_seq_len'] // 2)}}}",
        ]
    elif p.tokenizer:
        output = "embedding" if p.task == "embedding" else "logits"
        stage = "embed" if p.task == "embedding" else "classify"
        max_length = seq["max"] if seq else 128
        lines += [
            "# The app's side: text in, tokenized with the directory's tokenizer.json, then the model.",
            "pipeline:",
            "  inputs: {text: {type: text}}",
            f"  outputs: {{{output}: {stage}.{output}}}",
            "  tokenizers:",
            f"    tokenizer: {{huggingface: {_flow(p.source)}}}",
            "  stages:",
            f"    - {{name: tokens, op: tokenize, tokenizer: tokenizer, input: text, max_length: {max_length}}}",
            f"    - name: {stage}",
            "      op: model",
            f"      model: {p.name}",
            "      inputs: {input_ids: tokens.input_ids, attention_mask: tokens.attention_mask}",
        ]
    return "\n".join(lines) + "\n"


def _target_notes(targets: list[str], folder: Path) -> list[str]:
    from deployc.targets.backends import BACKENDS
    from deployc.targets.profile import load_profile, search_path

    notes = []
    for t in targets:
        profile = load_profile(t, folder, search_path(folder)).profile
        units = "; ".join(_unit_line(u, BACKENDS[u.backend].static_shapes_only) for u in profile.units)
        notes.append(f"{t}: {units}")
    return notes


def _plans(text: str, path: Path, target: str, toolchain: Toolchain) -> bool:
    """Whether `text`, as the manifest at `path`, plans for `target`."""
    try:
        _plan(text, path, target, toolchain)
        return True
    except UserError:
        return False


def _plan(text: str, path: Path, target: str, toolchain: Toolchain) -> None:
    """Plans `text` in memory as if it were the file at `path` (its folder and its errors' locations): init
    writes nothing but the manifest it makes, and no hash records."""
    make_plan(load_project(path, text=text), toolchain, target)


def make_starter(model_dir: Path, out: Path | None, task: str | None, targets: list[str],
                 toolchain: Toolchain) -> Starter:
    """The manifest text for `model_dir` (a Hugging Face directory or a GGUF file), planned for every target;
    raises UserError/UsageError."""
    kind = "gguf" if model_dir.is_file() else "huggingface"
    try:
        model = hf_directory.read_gguf(str(model_dir), Path.cwd()) if kind == "gguf" else hf_directory.read(model_dir)
    except HfProblem as exc:
        raise UserError.at(model_dir, str(exc)) from None
    config_at = model_dir / "config.json" if kind == "huggingface" else model_dir
    if task is not None and task not in hf_directory.TASKS:
        raise UsageError(f"--task {task}: not a task; one of {', '.join(hf_directory.TASKS)}")
    try:
        chosen = task or guess_task(model)
        derived = hf_directory.derive(model, chosen)
    except HfProblem as exc:
        raise UserError.at(config_at, str(exc)) from None
    name = model_name(model_dir.with_suffix("") if kind == "gguf" else model_dir)
    path = out or Path(f"{name}.yaml")
    if path.exists():
        raise UsageError(f"{path} exists; deployc init never overwrites a manifest (pass --out for another file)")
    folder = path.resolve().parent
    if not folder.is_dir():
        raise UsageError(f"no directory {folder} for {path}")
    source = Path(os.path.relpath(model_dir.resolve(), folder)).as_posix()
    if source == ".." or source.startswith("../"):
        raise UsageError(f"{model_dir} is not inside {folder}, where the manifest goes: a manifest builds from what "
                         "its folder holds", hint=f"write it beside the directory: --out {model_dir.resolve().parent}/"
                         f"{path.name}, or move the directory into {folder}")
    chosen_targets = bool(targets)
    if not targets:
        from deployc.targets.profile import profile_origins

        targets = list(profile_origins(folder))
    parts = _Parts(name=name, source=source, task=chosen,
                   derived=derived, tokenizer=chosen in hf_directory.TEXT_TASKS
                   and hf_directory.tokenizer_file(model.folder) is not None,
                   architecture=", ".join(model.config.get("architectures") or [model.model_type]),
                   target_notes=_target_notes(targets, folder), file=path.name, kind=kind)
    order = list(SCHEME_ORDER)
    if model.model_type in _CONV_FAMILIES:
        order.remove("w8a8")
        order.insert(0, "w8a8")
    if chosen == "text-generation":
        order.remove("8da4w")
        order.insert(0, "8da4w")
    takes = {s: [t for t in targets if _plans(_render(parts, [t], s, {}), path, t, toolchain)] for s in order}
    if not chosen_targets:  # every known profile was tried: keep those that can build the model at all
        usable = [t for t in targets if any(t in takes[s] for s in order)]
        if usable:
            targets = usable
            parts = replace(parts, target_notes=_target_notes(targets, folder))
    scheme = max(order, key=lambda s: len(takes[s]))  # max keeps the first of equals: the preferred one
    overrides: dict[str, str] = {}
    for t in targets:
        if t not in takes[scheme]:
            fits = [s for s in order if t in takes[s]]
            if not fits:
                raise UsageError(f"no unit of target '{t}' can build {model_dir} ({chosen}) with any scheme on "
                                 "this machine; `deployc plan` on the written manifest would say why per unit "
                                 "(run `deployc targets show " + t + "`)")
            overrides[t] = fits[0]
    text = _render(parts, targets, scheme, overrides)
    for t in targets:  # the manifest as written plans for every target; else its problems, at its lines
        _plan(text, path, t, toolchain)
    return Starter(path=path, text=text, task=chosen, schemes={t: overrides.get(t, scheme) for t in targets})


def write_new(path: Path, text: str) -> None:
    """Write `text` to `path` whole, or not at all; never replaces an existing file (one that appeared
    meanwhile included)."""
    try:
        write_atomic(path, text, replace=False)
    except FileExistsError:
        raise UsageError(f"{path} exists; deployc init never overwrites a manifest") from None
