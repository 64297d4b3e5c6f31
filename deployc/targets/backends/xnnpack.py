"""XNNPACK: the CPU delegate for Arm and x86. Its programs run on this host."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from deployc.quantization import SCHEMES, Recipe
from deployc.targets.backends.base import (
    BackendBase,
    describe_embedding_weights,
    describe_int8_dynamic_activations,
    int8_dynamic_activations,
)


_NORMS = ("aten.layer_norm.default", "aten.native_layer_norm.default", "aten.rms_norm.default")


def _off_the_residual_stream(node: Any) -> bool:
    """Whether static int8 may quantize `node`. A transformer's residual additions (those feeding a norm)
    stay float: one int8 scale for the whole residual stream costs a tiny ViT 12 dB of SQNR (15 -> 27 dB,
    measured), and the linears around them are quantized either way. A conv net's adds feed no norm."""
    if str(node.target) != "aten.add.Tensor":
        return True
    return not any(str(user.target) in _NORMS for user in node.users)


@dataclass(frozen=True)
class Xnnpack(BackendBase):
    def describe(self, recipe: Recipe, options: Mapping[str, Any]) -> str:
        if recipe.method == "torchao":
            text = describe_int8_dynamic_activations(SCHEMES[recipe.scheme].weight_bits, recipe.group_size)
            if recipe.embedding_bits:
                text += " + " + describe_embedding_weights(recipe.embedding_bits, recipe.group_size)
            return text
        if recipe.method == "pt2e":
            return "PT2E XNNPACKQuantizer(symmetric, per-channel, static), calibrated"
        return super().describe(recipe, options)

    def quantizer(self, recipe: Recipe, options: Mapping[str, Any]) -> Any:
        if recipe.method == "torchao":
            return int8_dynamic_activations(SCHEMES[recipe.scheme].weight_bits, recipe.group_size)
        from executorch.backends.xnnpack.quantizer.xnnpack_quantizer import (
            XNNPACKQuantizer,
            get_symmetric_quantization_config,
        )

        return (XNNPACKQuantizer().set_global(get_symmetric_quantization_config(is_per_channel=True))
                .set_filter_function(_off_the_residual_stream))

    def partitioner_objects(self, recipe: Recipe, options: Mapping[str, Any]) -> list[Any]:
        from executorch.backends.xnnpack.partition.xnnpack_partitioner import (
            XnnpackPartitioner,
        )

        return [XnnpackPartitioner()]


BACKEND = Xnnpack(name="xnnpack", methods={"fp32": "none", "8da8w": "torchao", "8da4w": "torchao", "w8a8": "pt2e"},
                  modules=("executorch.backends.xnnpack",), partitioners=("XnnpackPartitioner",),
                  quantized_embeddings=frozenset({"8da8w", "8da4w"}))
