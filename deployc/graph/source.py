"""Find a model factory's source files without importing them (validate/plan must not run user code)."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path


def module_roots(manifest_dir: Path) -> list[Path]:
    """Where factory modules are looked up: the manifest's folder first, then the Python path."""
    return [manifest_dir.resolve(), *(Path(p).resolve() for p in sys.path if p and Path(p).is_dir())]


def find_module_file(module: str, roots: Sequence[Path]) -> tuple[Path, Path] | None:
    """(root, file) of `module` under the first root that has it."""
    parts = module.split(".")
    for root in roots:
        base = root.joinpath(*parts)
        for candidate in (base.with_suffix(".py"), base / "__init__.py"):
            if candidate.is_file():
                return root, candidate
    return None


def source_files(module: str, roots: Sequence[Path]) -> list[Path]:
    """Files whose contents define the factory: the whole top-level package it lives in
    (helpers it imports change its output too), or the single module file."""
    found = find_module_file(module, roots)
    if found is None:
        return []
    root, file = found
    top = root / module.split(".")[0]
    if top.is_dir():
        return sorted(p for p in top.rglob("*.py") if "__pycache__" not in p.parts)
    return [file]
