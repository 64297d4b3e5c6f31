"""Installed Python distributions, looked up by name without importlib.metadata's email parser: the
sys.path folders are listed once, and a distribution's Name and Version are read from the header of its
METADATA (or PKG-INFO), the first match in sys.path order, as importlib.metadata finds it. `plan` asks
for some twenty versions; parsing each METADATA as an email message cost it about 30 ms.
"""

from __future__ import annotations

import functools
import re
import sys
from pathlib import Path

_SEPARATORS = re.compile(r"[-_.]+")


def canonical(name: str) -> str:
    """PEP 503's normalized form: case and runs of -_. do not matter."""
    return _SEPARATORS.sub("-", name).lower()


@functools.cache
def _metadata_files() -> dict[str, Path]:
    """canonical name -> METADATA (or PKG-INFO) of the first distribution of that name on sys.path."""
    found: dict[str, Path] = {}
    for entry in sys.path:
        folder = Path(entry or ".")
        try:
            names = sorted(p.name for p in folder.iterdir() if p.name.endswith((".dist-info", ".egg-info")))
        except OSError:
            continue
        for name in names:
            stem = name.rsplit(".", 1)[0]
            key = canonical(stem.split("-", 1)[0])
            meta = folder / name / ("METADATA" if name.endswith(".dist-info") else "PKG-INFO")
            if key not in found and meta.is_file():
                found[key] = meta
    return found


@functools.cache
def distribution(name: str) -> tuple[str, str] | None:
    """(Name, Version) as the distribution's metadata spells them; None when it is not installed."""
    meta = _metadata_files().get(canonical(name))
    if meta is None:
        return None
    fields: dict[str, str] = {}
    with meta.open(encoding="utf-8", errors="replace") as f:
        for line in f:
            if not line.strip():  # the end of the header: the description follows
                break
            key, sep, value = line.partition(":")
            if sep and key in ("Name", "Version") and key not in fields:
                fields[key] = value.strip()
            if len(fields) == 2:
                break
    if "Name" not in fields or "Version" not in fields:
        return None
    return fields["Name"], fields["Version"]


def version(name: str) -> str | None:
    found = distribution(name)
    return found[1] if found else None


def site_folder(name: str) -> Path | None:
    """The sys.path folder the distribution is installed in (where its packages' files are)."""
    meta = _metadata_files().get(canonical(name))
    return meta.parent.parent if meta is not None else None


def package_file(package: str, file: str) -> Path | None:
    """A file inside an installed top-level package, found without importing the package."""
    import importlib.util

    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):
        return None
    for root in (spec.submodule_search_locations or []) if spec else []:
        p = Path(root) / file
        if p.is_file():
            return p
    return None
