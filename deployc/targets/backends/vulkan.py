"""Vulkan: the GPU delegate. This host's runtime has no Vulkan delegate, so its programs are not run here."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from deployc.core.quantization import Recipe
from deployc.targets.backends.base import BackendBase


def _options(recipe: Recipe, options: Mapping[str, Any]) -> dict[str, Any]:
    merged = dict(options)
    if recipe.scheme == "fp16":
        merged.setdefault("force_fp16", True)
    return merged


@dataclass(frozen=True)
class Vulkan(BackendBase):
    def describe(self, recipe: Recipe, options: Mapping[str, Any]) -> str:
        extra = _options(recipe, options)
        return f"VulkanPartitioner({', '.join(f'{k}={v}' for k, v in sorted(extra.items()))})"

    def partitioner_objects(self, recipe: Recipe, options: Mapping[str, Any]) -> list[Any]:
        from executorch.backends.vulkan.partitioner.vulkan_partitioner import (
            VulkanPartitioner,
        )

        return [VulkanPartitioner(_options(recipe, options))]


BACKEND = Vulkan(
    name="vulkan", methods={"fp32": "none", "fp16": "none"}, modules=("executorch.backends.vulkan",),
    partitioners=("VulkanPartitioner",),
    not_run_here="Vulkan programs need a GPU with the Vulkan delegate; this host's runtime has none")
