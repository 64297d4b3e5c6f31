"""Cortex-M: int8 kernels for microcontrollers (CMSIS-NN), no delegate: the Cortex-M pass manager
rewrites the quantized graph into cortex_m:: operators. This host's runtime lacks those kernels."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from deployc.core.errors import BuildError
from deployc.core.quantization import Recipe
from deployc.targets.backends.base import BackendBase

DEFAULT_CPU = "cortex-m55"


@dataclass(frozen=True)
class CortexM(BackendBase):
    def describe(self, recipe: Recipe, options: Mapping[str, Any]) -> str:
        return (f"PT2E CortexMQuantizer (static int8), calibrated; Cortex-M pass manager for "
                f"{options.get('cpu', DEFAULT_CPU)}")

    def requirements(self, options: Mapping[str, Any], toolchain: Mapping[str, str]) -> dict[str, str]:
        return {"cpu": str(options.get("cpu", DEFAULT_CPU)), "kernels": "cortex_m (CMSIS-NN)"}

    def quantizer(self, recipe: Recipe, options: Mapping[str, Any]) -> Any:
        from executorch.backends.cortex_m.quantizer.quantizer import CortexMQuantizer

        # The explicit-layout pipeline: the legacy one quantizes a convolution only when its tensors are
        # channels-last in memory, so a model exported as written (NCHW) kept every convolution in float.
        return CortexMQuantizer(use_explicit_layout=True)

    def to_edge(self, programs: dict[str, Any], recipe: Recipe, options: Mapping[str, Any],
                constants: Mapping[str, Any]) -> Any:
        from executorch.backends.cortex_m.edge_compile_config import (
            cortex_m_edge_compile_config,
        )
        from executorch.backends.cortex_m.passes.cortex_m_pass_manager import (
            CortexMPassManager,
        )
        from executorch.backends.cortex_m.target_config import CortexM as Core
        from executorch.backends.cortex_m.target_config import CortexMTargetConfig
        from executorch.exir import to_edge

        cpu = str(options.get("cpu", DEFAULT_CPU))
        member = cpu.lower().replace("cortex-", "").replace("+", "PLUS").upper()
        if member not in Core.__members__:
            raise BuildError(f"unit option cpu: {cpu!r} is not a Cortex-M core; choose one of "
                             f"{', '.join('cortex-' + n.lower() for n in Core.__members__)}")
        edge = to_edge(programs["forward"], compile_config=cortex_m_edge_compile_config())
        transformed = CortexMPassManager(edge.exported_program(), target_config=CortexMTargetConfig(cpu=Core[member]),
                                         use_explicit_layout=True).transform()
        # executorch 1.5.1 has no public setter for a transformed method (measured; see executorch-notes.md).
        edge._edge_programs["forward"] = transformed
        return edge


BACKEND = CortexM(
    name="cortex_m", methods={"w8a8": "pt2e"}, modules=("executorch.backends.cortex_m", "tosa_serializer"),
    static_shapes_only=True,
    not_run_here="Cortex-M kernels are not registered in this host's runtime",
    host_reference="cortex_m reference kernels on this host; not the device runtime")
