"""Realise a plan's quantization recipe on a model: torchao configs before export, PT2E around it."""

from __future__ import annotations

from collections.abc import Callable

import torch

from deployc.errors import BuildError
from deployc.targets.recipes import Recipe


def torchao_quantize(model: torch.nn.Module, recipe: Recipe) -> torch.nn.Module:
    from torchao.quantization import Int8DynamicActivationIntxWeightConfig, quantize_
    from torchao.quantization.granularity import PerAxis, PerGroup

    if recipe.scheme == "8da8w":
        config = Int8DynamicActivationIntxWeightConfig(weight_dtype=torch.int8, weight_granularity=PerAxis(0))
    elif recipe.scheme == "8da4w":
        config = Int8DynamicActivationIntxWeightConfig(weight_dtype=torch.int4,
                                                       weight_granularity=PerGroup(recipe.group_size or 32))
    else:
        raise BuildError(f"no torchao recipe for scheme {recipe.scheme}")
    group = recipe.group_size

    def eligible(module: torch.nn.Module, fqn: str) -> bool:
        # Grouped int4 needs in_features divisible by the group; other linears stay float. Attention's
        # out_proj is marked non-quantizable: F.multi_head_attention_forward transposes its raw weight.
        if isinstance(module, torch.nn.modules.linear.NonDynamicallyQuantizableLinear):
            return False
        return isinstance(module, torch.nn.Linear) and (group is None or module.in_features % group == 0)

    quantize_(model, config, filter_fn=eligible)
    return model


def pt2e_quantizer(backend: str, recipe: Recipe) -> object:
    if backend == "xnnpack":
        from executorch.backends.xnnpack.quantizer.xnnpack_quantizer import (
            XNNPACKQuantizer,
            get_symmetric_quantization_config,
        )

        return XNNPACKQuantizer().set_global(get_symmetric_quantization_config(is_per_channel=True))
    if backend == "cortex_m":
        from executorch.backends.cortex_m.quantizer.quantizer import CortexMQuantizer

        return CortexMQuantizer()
    raise BuildError(f"no PT2E quantizer for backend {backend} on this machine")


def pt2e_quantize(ep: torch.export.ExportedProgram, backend: str, recipe: Recipe,
                  calibration: list[list[torch.Tensor]],
                  reexport: Callable[[torch.nn.Module], torch.export.ExportedProgram]) -> torch.export.ExportedProgram:
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    prepared = prepare_pt2e(ep.module(check_guards=False), pt2e_quantizer(backend, recipe))
    for sample in calibration:
        prepared(*sample)
    return reexport(convert_pt2e(prepared))
