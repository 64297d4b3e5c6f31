"""Every path a manifest names, checked before anything looks it up on disk: a usable length, no control
characters, and (for the project's own data: weights, model directories, tokenizers) inside the manifest's
folder, so that a clean checkout builds from what it holds. A path the file system would refuse (a 5,000
character name) is a located input error, never an OSError reported as a disk failure.

Corpus globs, calibration datasets and preprocessor configs have the inside-the-folder rule in their own
checks (with their own wording); target profile paths may leave the folder: shared profiles live apart.
"""

from __future__ import annotations

from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

from deployc.core.errors import Diagnostic
from deployc.core.records import GgufRef
from deployc.core.yaml_io import Document
from deployc.pipeline.ops import op_of

if TYPE_CHECKING:
    from deployc.load.manifest import Manifest, ModelSpec, VerifySpec

MAX_NAME_BYTES = 255  # what Linux, macOS and Windows file systems take for one name
MAX_PATH_BYTES = 1024  # well under PATH_MAX (4096): a manifest's relative path anywhere near it is a mistake


def path_problem(value: str, inside: str | None) -> str | None:
    """Why `value` cannot be used as a relative path; None when it can. `inside`: what it must stay inside
    (the manifest's folder, a package), or None when it may point anywhere."""
    if not value:
        return "is empty"
    bad = next((c for c in value if ord(c) < 32 or ord(c) == 127), None)
    if bad is not None:
        return f"contains the control character {bad!r}"
    size = len(value.encode("utf-8", "surrogateescape"))
    if size > MAX_PATH_BYTES:
        return f"is {size} bytes long; a path here takes at most {MAX_PATH_BYTES}"
    parts = PurePosixPath(value).parts
    for part in parts:
        if len(part.encode("utf-8", "surrogateescape")) > MAX_NAME_BYTES:
            return (f"has a name of {len(part.encode('utf-8', 'surrogateescape'))} bytes ({part[:24]}...); "
                    f"file names take at most {MAX_NAME_BYTES}")
    if inside and (PurePosixPath(value).is_absolute() or Path(value).is_absolute() or ".." in parts):
        return f"{value!r} must stay inside {inside} (a relative path without '..')"
    return None


FOLDER = "the manifest's folder"


def _gguf_paths(path: tuple[str | int, ...], ref: GgufRef | None
                ) -> list[tuple[tuple[str | int, ...], str, str | None]]:
    if ref is None:
        return []
    if isinstance(ref, str):
        return [(path, ref, FOLDER)]
    return [((*path, "file"), ref.file, f"package {ref.package}")]


def _named_paths(m: Manifest) -> list[tuple[tuple[str | int, ...], str, str | None]]:
    """(YAML path of the field, its value, what it must stay inside) for every path field."""
    out: list[tuple[tuple[str | int, ...], str, str | None]] = []
    for i, t in enumerate(m.targets):
        out.append((("targets", i), t, None))
    for name, model in m.models.items():
        base = ("models", name)
        src = model.source
        if src.huggingface is not None:
            out.append(((*base, "source", "huggingface"), src.huggingface, FOLDER))
        out.extend(_gguf_paths((*base, "source", "gguf"), src.gguf))
        if src.checkpoint is not None:
            out.append(((*base, "source", "checkpoint", "path"), src.checkpoint.path, FOLDER))
        places = [((*base, "quantization"), model.quantization)] + [
            ((*base, "overrides", t, "quantization"), o.quantization) for t, o in model.overrides.items()]
        for path, q in places:
            if q is not None and q.calibration is not None and q.calibration.dataset is not None:
                out.append(((*path, "calibration", "dataset"), q.calibration.dataset, None))
            if q is not None and q.calibration is not None and q.calibration.text is not None:
                out.append(((*path, "calibration", "text"), q.calibration.text, FOLDER))
        for where, v in verify_places(name, model):
            if v.text is not None:
                out.append(((*where, "text"), v.text, FOLDER))
            if v.data is not None:
                out.append(((*where, "data"), v.data, FOLDER))
    p = m.pipeline
    if p is not None:
        for name, tokenizer in p.tokenizers.items():
            for field in ("path", "huggingface", "file"):
                value = getattr(tokenizer, field)
                if value is not None:
                    inside = f"package {tokenizer.package}" if field == "file" else FOLDER
                    out.append((("pipeline", "tokenizers", name, field), value, inside))
            out.extend(_gguf_paths(("pipeline", "tokenizers", name, "gguf"), tokenizer.gguf))
        for name, ix in p.indexes.items():
            out.append((("pipeline", "indexes", name, "corpus"), ix.corpus, None))
        for i, stage in enumerate(p.stages):
            for field in op_of(stage).paths:
                value = getattr(stage, field)
                if value is not None:
                    out.append((("pipeline", "stages", i, field), value, None))
    return out


def verify_places(name: str, model: ModelSpec) -> list[tuple[tuple[str, ...], VerifySpec]]:
    out = [(("models", name, "verify"), model.verify)]
    return out + [(("models", name, "overrides", t, "verify"), o.verify) for t, o in model.overrides.items()
                  if o.verify is not None]


def check_paths(m: Manifest, doc: Document) -> list[Diagnostic]:
    found = []
    for path, value, inside in _named_paths(m):
        if path[0] == "targets" and "/" not in value and not value.endswith((".yaml", ".yml")):
            continue  # a profile name, checked by the profile search
        problem = path_problem(value, inside)
        if problem is not None:
            dotted = ".".join(f"[{p}]" if isinstance(p, int) else p for p in path).replace(".[", "[")
            found.append(Diagnostic(doc.locate(path), f"{dotted}: {_shown(value)} {problem}"
                                    if not problem.startswith(repr(value)) else f"{dotted}: {problem}"))
    return found


def _shown(value: Any) -> str:
    text = str(value)
    return repr(text if len(text) <= 60 else text[:40] + "..." + text[-12:])
