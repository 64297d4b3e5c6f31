"""Backend registry: what each ExecuTorch backend can build and where its programs run.

A plain dict of small records, passed explicitly; its keys are the schema's allowed backend names.
Nothing here imports torch: partitioners are built in deployc.graph.lower, keyed by backend name.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Protocol

from deployc.targets.recipes import supported

QNN_LIB = "lib/x86_64-linux-clang/libQnnHtp.so"


@dataclass(frozen=True)
class Availability:
    usable: bool
    reason: str = ""


class Backend(Protocol):
    name: str
    schemes: frozenset[str]
    host_runnable: bool  # can the host's executorch.runtime execute this backend's programs?
    static_shapes_only: bool
    not_run_reason: str

    def available(self, env: Mapping[str, str]) -> Availability: ...


class _Schemes:
    name: str

    @property
    def schemes(self) -> frozenset[str]:
        return frozenset(supported(self.name))


@dataclass(frozen=True)
class _Module(_Schemes):
    """A backend whose ahead-of-time toolchain ships in the executorch wheel."""

    name: str
    modules: tuple[str, ...]  # all must be importable for the ahead-of-time path to work
    host_runnable: bool
    static_shapes_only: bool = False
    not_run_reason: str = ""

    def available(self, env: Mapping[str, str]) -> Availability:
        for module in self.modules:
            try:
                found = importlib.util.find_spec(module) is not None
            except (ImportError, ValueError):
                found = False
            if not found:
                return Availability(False, f"Python module {module} is not installed")
        return Availability(True)


@dataclass(frozen=True)
class _Qnn(_Schemes):
    name: str
    host_runnable: bool = False
    static_shapes_only: bool = True
    not_run_reason: str = "QNN programs run on a Hexagon NPU; this host has none"

    def available(self, env: Mapping[str, str]) -> Availability:
        root = env.get("QNN_SDK_ROOT", "")
        if not root:
            return Availability(False, "Qualcomm QNN SDK not found (QNN_SDK_ROOT is not set)")
        if not (Path(root) / QNN_LIB).is_file():
            return Availability(False, f"QNN_SDK_ROOT={root} has no {QNN_LIB}")
        return Availability(True)


BACKENDS: dict[str, Backend] = {
    b.name: b
    for b in (
        _Module("xnnpack", ("executorch.backends.xnnpack",), host_runnable=True),
        _Module("vulkan", ("executorch.backends.vulkan",), host_runnable=False,
                not_run_reason="Vulkan programs need a GPU with the Vulkan delegate; this host's runtime has none"),
        _Module("cortex_m", ("executorch.backends.cortex_m", "tosa_serializer"), host_runnable=False,
                static_shapes_only=True,
                not_run_reason="Cortex-M kernels are not registered in this host's runtime"),
        _Module("portable", ("executorch.exir",), host_runnable=True),
        _Qnn("qnn"),
    )
}

BackendName = Literal["xnnpack", "vulkan", "cortex_m", "portable", "qnn"]


def backend_env(env: Mapping[str, str] | None = None) -> dict[str, str]:
    return dict(os.environ if env is None else env)
