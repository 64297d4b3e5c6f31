"""Facts about the build machine that change what gets built: tool versions, usable backends, and
the source of deployc's own compile code.

Read from package metadata, the environment and deployc's files; nothing is imported, so `plan`
stays instant. A program key folds all of it: a new torch, or an edit to how deployc lowers or
quantizes, never reuses a program built the old way (a shared cache included).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path

import deployc
from deployc.core import installed
from deployc.core.digests import file_sha256, key_of
from deployc.core.records import Frozen
from deployc.targets.backends import BACKENDS, backend_files
from deployc.targets.backends.base import Availability

# Every package whose version can change a program's bytes (flatbuffers included: it serializes them).
VERSIONED = ("torch", "executorch", "torchao", "flatbuffers", "numpy")

_PACKAGE = Path(deployc.__file__).resolve().parent
# deployc's code that makes and measures every program, whatever the backend (relative to the package).
COMPILE_CODE = ("graph", "core/facts.py", "core/dims.py", "core/self_test_vectors.py", "targets/backends/base.py",
                "targets/backends/pass_skips.py", "core/pte.py")
# deployc's code that writes bundles: not in program keys, but a bundle made by other packaging code may differ.
PACKAGE_CODE = ("packaging", "core/layout.py", "pipeline/config.py", "pipeline/graph.py", "pipeline/ops",
                "pipeline/host")


class Toolchain(Frozen):
    versions: dict[str, str]
    backends: dict[str, Availability]  # can each backend's programs be built here
    runs: dict[str, Availability]  # can this host's runtime execute each backend's programs
    code: dict[str, str]  # "compile", "package" and each backend name -> sha256 of the deployc source that makes it


def _version(dist: str) -> str:
    return installed.version(dist) or "not-installed"


def _files_sha256(files: list[Path]) -> str:
    return key_of([(f.relative_to(_PACKAGE).as_posix(), file_sha256(f)) for f in sorted(files)])


def _code(entries: tuple[str, ...]) -> str:
    files: list[Path] = []
    for entry in entries:
        path = _PACKAGE / entry
        files += sorted(path.rglob("*.py")) if path.is_dir() else [path]
    return _files_sha256([f for f in files if "__pycache__" not in f.parts])


def code_hashes() -> dict[str, str]:
    out = {"compile": _code(COMPILE_CODE), "package": _code(PACKAGE_CODE)}
    out.update({name: _files_sha256(backend_files(name)) for name in BACKENDS})
    return out


def detect(env: Mapping[str, str] | None = None) -> Toolchain:
    env = dict(os.environ if env is None else env)
    versions = {"python": "{}.{}.{}".format(*sys.version_info[:3]), "deployc": deployc.__version__}
    versions.update({name: _version(name) for name in VERSIONED})
    backends = {n: b.availability(env) for n, b in BACKENDS.items()}
    return Toolchain(versions=versions, backends=backends, code=code_hashes(),
                     runs={n: b.runs_here(env) if backends[n].usable else Availability(
                         usable=False, reason=f"no {n} toolchain here: {backends[n].reason}")
                         for n, b in BACKENDS.items()})
