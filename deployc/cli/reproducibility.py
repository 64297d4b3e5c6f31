"""`build --check-reproducible`: a second build in a fresh process, empty cache, compared byte for byte."""

from __future__ import annotations

import filecmp
import subprocess
import sys
import tempfile
from pathlib import Path

import deployc
from deployc.build.results import BundleResult
from deployc.core.errors import BuildError


def _files(folder: Path) -> dict[str, Path]:
    return {p.relative_to(folder).as_posix(): p for p in folder.rglob("*") if p.is_file()}


def compare_trees(a: Path, b: Path) -> list[str]:
    fa, fb = _files(a), _files(b)
    out = [f"{n}: only in the first build" for n in sorted(set(fa) - set(fb))]
    out += [f"{n}: only in the second build" for n in sorted(set(fb) - set(fa))]
    out += [f"{n}: bytes differ" for n in sorted(set(fa) & set(fb)) if not filecmp.cmp(fa[n], fb[n], shallow=False)]
    return out


def rebuild_and_compare(what: list[str], bundles: dict[str, BundleResult]) -> list[str]:
    """`what`: the build's own arguments naming what to build (a manifest and --target, or --plan FILE)."""
    with tempfile.TemporaryDirectory(prefix="deployc-repro-") as tmp:
        out, cache = Path(tmp) / "out", Path(tmp) / "cache"
        cmd = [sys.executable, "-m", deployc.__name__, "build", *what, "--out", str(out), "--cache-dir", str(cache),
               "--json"]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            raise BuildError(f"the second build failed (exit {proc.returncode}): {proc.stderr.strip()[-500:]}")
        differences = []
        for t, paths in sorted(bundles.items()):
            first_dir, first_archive = Path(paths.dir), Path(paths.archive)
            second_dir = out / first_dir.relative_to(first_dir.parent.parent.parent)
            second_archive = second_dir.parent / first_archive.name
            differences += [f"{t}/{d}" for d in compare_trees(first_dir, second_dir)]
            if not second_archive.is_file() or not filecmp.cmp(first_archive, second_archive, shallow=False):
                differences.append(f"{first_archive.name}: bytes differ")
        return differences
