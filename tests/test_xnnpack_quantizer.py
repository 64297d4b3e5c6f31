"""XNNPACK's static int8 quantizer as deployc configures it (targets/backends/xnnpack.py): a zero pad shares
its input's scale, and so does the pool after it, so that XNNPACK takes the quantized pad (BiT's stem)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from conftest import build_project
from fixtures import testnets

from deployc.core.quantization import Recipe
from deployc.graph.quantize import float_paths_only
from deployc.targets.backends.xnnpack import BACKEND


def _annotated(model: torch.nn.Module) -> dict[str, Any]:
    """Each pad and pool's annotation after deployc's XNNPACK quantizer annotated the exported model."""
    module = torch.export.export(model, (torch.rand(1, 3, 12, 12),)).module()
    quantizer = float_paths_only(BACKEND.quantizer(Recipe(scheme="w8a8", method="pt2e"), {}))
    quantizer.annotate(quantizer.transform_for_annotation(module))
    return {str(n.target): n.meta.get("quantization_annotation") for n in module.graph.nodes
            if "pad" in str(n.target) or "max_pool" in str(n.target)}


def test_a_zero_pad_and_the_pool_after_it_share_the_input_s_scale() -> None:
    from torchao.quantization.pt2e.quantizer import SharedQuantizationSpec

    annotations = _annotated(testnets.padded_pool())
    pad, pool = annotations["aten.pad.default"], annotations["aten.max_pool2d.default"]
    for annotation in (pad, pool):
        assert annotation is not None and isinstance(annotation.output_qspec, SharedQuantizationSpec)
    assert str(pad.output_qspec.edge_or_node.target) == "aten.relu.default"  # the stem's quantized output


@pytest.mark.parametrize("value,mode", [(-1.0, "constant"), (0.0, "reflect")])
def test_a_pad_that_fills_with_anything_but_zero_is_left_alone(value: float, mode: str) -> None:
    # -1 would be rounded to the scale of a relu's output; a reflect pad is not a constant pad
    annotations = _annotated(testnets.padded_pool(value, mode))
    assert not any(key.startswith("aten.pad") or "reflection" in key for key, a in annotations.items()
                   if a is not None and a.output_qspec is not None)


MANIFEST = """\
apiVersion: deployc/v1
name: padded
version: 0.1.0
targets: [arduino_q]
models:
  padded:
    source: {factory: "models.testnets:padded_pool"}
    inputs:
      x: {shape: [1, 3, 12, 12], range: [-1, 1]}
    quantization: {scheme: w8a8}
    overrides:
      arduino_q: {unit: cpu}
"""


@pytest.mark.slow
def test_a_padded_pool_builds_in_w8a8_and_verifies(tmp_path: Path) -> None:
    # Before: XNNPACK refused the program at load ("Failed to create StaticConstantPad node ...
    # xnn_status_invalid_parameter"): the pad's input was int8 and its output float.
    built = build_project(tmp_path, MANIFEST, "padded.yaml")
    unit = built.unit("padded", "arduino_q")
    assert unit["status"] == "built" and unit["verification"]["status"] == "passed", unit["failure"]
    assert unit["verification"]["metrics"]["min_sqnr_db"] > 25
    assert not any("pad" in op for op in unit["non_delegated_ops"])
