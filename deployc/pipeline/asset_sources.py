"""The files a pipeline's assets come from: tokenizer files and corpus globs, found without importing
anything. Read by validate (do they exist?) and by the planner (their hashes)."""

from __future__ import annotations

import functools
from pathlib import Path

from deployc.core.cache_location import cache_spec, local_root
from deployc.core.file_hashes import FileHashes
from deployc.core.installed import package_file
from deployc.core.records import GgufRef
from deployc.pipeline.declarations import IndexAsset, IndexQueries, TokenizerAsset

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg")


def tokenizer_file(asset: TokenizerAsset, folder: Path) -> Path | None:
    if asset.path is not None:
        p = folder / asset.path
        return p if p.is_file() else None
    if asset.huggingface is not None:  # a model directory's tokenizer.json
        p = folder / asset.huggingface / "tokenizer.json"
        return p if p.is_file() else None
    if asset.gguf is not None:  # the tokenizer a GGUF file describes, as a tokenizer.json
        return gguf_tokenizer(asset.gguf, folder)
    if asset.package and asset.file:
        return package_file(asset.package, asset.file)
    return None


def gguf_file(ref: GgufRef, folder: Path) -> Path | None:
    """The GGUF file a manifest names: a path relative to its folder, or a file inside a package."""
    if isinstance(ref, str):
        p = folder / ref
        return p if p.is_file() else None
    return package_file(ref.package, ref.file)


def gguf_problem(ref: GgufRef, folder: Path) -> str | None:
    """Why a GGUF file cannot give a model or tokenizer: missing, damaged, or of a kind deployc cannot read."""
    from deployc.core.gguf import GgufProblem

    path = gguf_file(ref, folder)
    if path is None:
        return f"{ref}: no such file in the manifest's folder" if isinstance(ref, str) else \
            f"no file {ref.file} in package {ref.package} (is it installed?)"
    try:
        gguf_view(path)
    except GgufProblem as exc:
        return str(exc)
    return None


def gguf_tokenizer(ref: GgufRef, folder: Path) -> Path | None:
    """tokenizer.json of the GGUF file's view; None when the file is missing or unreadable (validate says why)."""
    from deployc.core.gguf import GgufProblem

    path = gguf_file(ref, folder)
    if path is None:
        return None
    try:
        return gguf_view(path) / "tokenizer.json"
    except GgufProblem:
        return None


def gguf_view(path: Path) -> Path:
    """The folder that shows a GGUF file as a Hugging Face directory (config.json, tokenizer.json,
    tokenizer_config.json), in deployc's cache ($DEPLOYC_CACHE_DIR, which --cache-dir sets, else ~/.cache/deployc),
    named by the file's sha256 (remembered there)."""
    st = path.stat()
    key = (path.resolve(), st.st_size, st.st_mtime_ns, str(local_root(cache_spec(None))))
    folder = _view(*key)
    if not all((folder / f).is_file() for f in ("config.json", "tokenizer.json", "tokenizer_config.json")):
        _view.cache_clear()  # the cache's folder was removed meanwhile: make it again
        folder = _view(*key)
    return folder


@functools.lru_cache(maxsize=8)
def _view(path: Path, size: int, mtime_ns: int, root: str) -> Path:
    """One read of the header per file state and cache root in a process (validate and plan ask several times)."""
    from deployc.core import gguf, gguf_model

    return gguf_model.view(gguf.read(path), FileHashes(Path(root)).sha256(path), Path(root))


def corpus_files(index: IndexAsset, folder: Path) -> tuple[list[Path], list[str]]:
    """Files the corpus glob selects, and why any were refused (outside the manifest's folder, links)."""
    problems: list[str] = []
    if Path(index.corpus).is_absolute() or ".." in Path(index.corpus).parts:
        return [], [f"corpus glob {index.corpus!r} must stay inside the manifest's folder"]
    base = folder.resolve()
    files = []
    for p in sorted(folder.glob(index.corpus)):
        if not p.is_file():
            continue
        if p.is_symlink() or not p.resolve().is_relative_to(base):
            problems.append(f"{p.relative_to(folder)} is a symlink or lies outside the manifest's folder")
            continue
        files.append(p)
    return files, problems


def index_queries(queries: IndexQueries, folder: Path) -> tuple[list[str], str | None]:
    """An index's query set (one query a line, blank lines skipped), or why it cannot be read."""
    path = folder / queries.file
    if Path(queries.file).is_absolute() or ".." in Path(queries.file).parts:
        return [], f"{queries.file!r} must stay inside the manifest's folder"
    if not path.is_file():
        return [], f"{queries.file}: no such file"
    try:
        lines = [line.strip() for line in path.read_text(encoding="utf-8").splitlines()]
    except UnicodeDecodeError as exc:
        return [], f"{queries.file}: not UTF-8 text ({exc.reason} at byte {exc.start})"
    found = [line for line in lines if line]
    if len(found) < 2:
        return [], f"{queries.file}: {len(found)} query line(s); give at least 2, one a line"
    return found, None
