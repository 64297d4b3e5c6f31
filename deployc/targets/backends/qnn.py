"""Qualcomm QNN: the Hexagon NPU (HTP). Needs the QNN SDK's host libraries on the build machine;
nothing here ever downloads one."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from deployc.errors import BuildError
from deployc.quantization import Recipe
from deployc.targets.backends.base import USABLE, Availability, BackendBase

HTP_LIBRARY = "lib/x86_64-linux-clang/libQnnHtp.so"

_QUANT_CONFIG = {"w8a8": "use_8a8w", "16a8w": "use_16a8w", "16a4w": "use_16a4w"}


@dataclass(frozen=True)
class Qnn(BackendBase):
    def availability(self, env: Mapping[str, str]) -> Availability:
        root = env.get("QNN_SDK_ROOT", "")
        if not root:
            return Availability(usable=False, reason="Qualcomm QNN SDK not found (QNN_SDK_ROOT is not set)")
        if not (Path(root) / HTP_LIBRARY).is_file():
            return Availability(usable=False, reason=f"QNN_SDK_ROOT={root} has no {HTP_LIBRARY}")
        return USABLE

    def describe(self, recipe: Recipe, options: Mapping[str, Any]) -> str:
        soc = options.get("soc_model", "?")
        if recipe.method == "pt2e":
            return f"PT2E QnnQuantizer({_QUANT_CONFIG[recipe.scheme]}), calibrated; HTP for {soc}"
        return f"HTP fp16 for {soc}"

    def to_edge(self, programs: dict[str, Any], recipe: Recipe, options: Mapping[str, Any],
                constants: Mapping[str, Any]) -> Any:
        raise BuildError("QNN lowering is not implemented in this version of deployc; the planner picks the "
                         "next unit unless the profile says fallback: error or the model pins the npu unit")


BACKEND = Qnn(
    name="qnn", methods={"w8a8": "pt2e", "16a8w": "pt2e", "16a4w": "pt2e", "fp16": "none"},
    partitioners=("QnnPartitioner",), static_shapes_only=True,
    runs_here=Availability(usable=False, reason="QNN programs run on a Hexagon NPU; this host has none"))
