"""Facts about the build machine that change what gets built: tool versions, usable backends.

Read from package metadata and the environment; nothing is imported, so `plan` stays instant.
"""

from __future__ import annotations

import importlib.metadata
import platform
from collections.abc import Mapping

from pydantic import BaseModel, ConfigDict

import deployc
from deployc.targets.backends import BACKENDS, backend_env

# Every package whose version can change a program's bytes (flatbuffers included: it serializes them).
VERSIONED = ("torch", "executorch", "torchao", "flatbuffers", "numpy")


class BackendStatus(BaseModel):
    model_config = ConfigDict(frozen=True)
    usable: bool
    reason: str = ""


class Toolchain(BaseModel):
    model_config = ConfigDict(frozen=True)
    versions: dict[str, str]
    backends: dict[str, BackendStatus]


def _version(dist: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "not-installed"


def detect(env: Mapping[str, str] | None = None) -> Toolchain:
    env = backend_env(env)
    versions = {"python": platform.python_version(), "deployc": deployc.__version__}
    versions.update({name: _version(name) for name in VERSIONED})
    backends = {}
    for name, backend in BACKENDS.items():
        a = backend.available(env)
        backends[name] = BackendStatus(usable=a.usable, reason=a.reason)
    return Toolchain(versions=versions, backends=backends)
