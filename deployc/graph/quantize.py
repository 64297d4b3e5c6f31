"""Apply a plan's quantization recipe to a model, with the quantizer its backend builds: torchao
configs before export, PT2E (prepare, calibrate, convert) around it."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from deployc.errors import BuildError
from deployc.fingerprint import file_sha256
from deployc.graph.inputs import export_point, make_inputs
from deployc.plan import Export
from deployc.quantization import Recipe


def torchao_quantize(model: torch.nn.Module, config: Any, group_size: int | None) -> torch.nn.Module:
    from torchao.quantization import quantize_

    def eligible(module: torch.nn.Module, fqn: str) -> bool:
        # Grouped int4 needs in_features divisible by the group; other linears stay float. Attention's
        # out_proj is marked non-quantizable: F.multi_head_attention_forward transposes its raw weight.
        if isinstance(module, torch.nn.modules.linear.NonDynamicallyQuantizableLinear):
            return False
        return isinstance(module, torch.nn.Linear) and (group_size is None or module.in_features % group_size == 0)

    quantize_(model, config, filter_fn=eligible)
    return model


def pt2e_quantize(ep: torch.export.ExportedProgram, quantizer: Any, calibration: list[list[torch.Tensor]],
                  reexport: Callable[[torch.nn.Module], torch.export.ExportedProgram]) -> torch.export.ExportedProgram:
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    prepared = prepare_pt2e(ep.module(check_guards=False), quantizer)
    for sample in calibration:
        prepared(*sample)
    return reexport(convert_pt2e(prepared))


def calibration_samples(recipe: Recipe, export: Export, folder: Path) -> list[list[torch.Tensor]]:
    """The manifest's dataset (sha256-checked), or seeded random samples within the inputs' ranges."""
    if not recipe.calibration_dataset:
        return [make_inputs(export.inputs, export_point(export.dims), (recipe.calibration_seed or 0) + 1000 + j)
                for j in range(recipe.calibration_samples or 1)]
    path = folder / recipe.calibration_dataset
    if file_sha256(path) != recipe.calibration_dataset_sha256:
        raise BuildError(f"calibration dataset {recipe.calibration_dataset} changed since the plan was made")
    samples = torch.load(path, weights_only=True)
    if not isinstance(samples, (list, tuple)) or not samples or not all(
            isinstance(s, (list, tuple)) and len(s) == len(export.inputs) for s in samples):
        raise BuildError(f"calibration dataset {recipe.calibration_dataset}: expected a non-empty list of samples, "
                         f"each a list of {len(export.inputs)} tensor(s) in input order")
    return [list(s) for s in samples]
