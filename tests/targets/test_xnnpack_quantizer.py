"""XNNPACK's static int8 quantizer as deployc configures it (targets/backends/xnnpack.py): a zero pad shares
its input's scale, and so does the pool after it, so that XNNPACK takes the quantized pad (BiT's stem); a
convolution's ReLU6 is observed after the clamp, as its ReLU is; a linear that writes a model output takes
its input's scale at run time and writes float."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from helpers import testnets
from helpers.projects import build_project

from deployc.core.quantization import Recipe
from deployc.graph.quantize import float_paths_only
from deployc.targets.backends.xnnpack import BACKEND


def _annotate(model: torch.nn.Module, example: torch.Tensor) -> Any:
    """The exported model as deployc's XNNPACK quantizer annotated it."""
    module = torch.export.export(model, (example,)).module()
    quantizer = float_paths_only(BACKEND.quantizer(Recipe(scheme="w8a8", method="pt2e"), {}))
    quantizer.annotate(quantizer.transform_for_annotation(module))
    return module


def _annotated(model: torch.nn.Module) -> dict[str, Any]:
    """Each pad and pool's annotation after deployc's XNNPACK quantizer annotated the exported model."""
    module = _annotate(model, torch.rand(1, 3, 12, 12))
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


def _clamps(model: torch.nn.Module, example: torch.Tensor) -> list[tuple[Any, Any]]:
    """Each clamp's annotation and its input layer's, after deployc's XNNPACK quantizer annotated the model."""
    module = _annotate(model, example)
    return [(n.meta.get("quantization_annotation"), n.args[0].meta.get("quantization_annotation"))
            for n in module.graph.nodes if str(n.target).startswith(("aten.hardtanh", "aten.relu6"))]


def test_a_conv_s_relu6_is_observed_after_the_clamp_and_not_before() -> None:
    from torchao.quantization.pt2e.quantizer import QuantizationSpec

    clamps = _clamps(testnets.mobile_blocks(), torch.rand(1, 3, 16, 16))
    assert len(clamps) == 13  # the stem's and two per block
    for clamp, conv in clamps:
        assert isinstance(clamp.output_qspec, QuantizationSpec) and not clamp.input_qspec_map
        assert conv.output_qspec is None and conv.input_qspec_map  # the conv's input and weights stay int8


class _HardSwish(torch.nn.Module):
    """A conv and MobileNetV3's hard swish as pytorchcv writes it."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.conv(x)
        return h * torch.nn.functional.relu6(h + 3) / 6


def test_a_clamp_after_an_add_keeps_the_add_s_range() -> None:
    # MobileNetV3's hard swish lost 2 dB when its relu6 was observed after the clamp instead (measured):
    # the add's output stays observed and the relu6 as XNNPACK's quantizer leaves it
    [(clamp, add)] = _clamps(_HardSwish(), torch.rand(1, 3, 4, 4))
    assert add.output_qspec is not None and clamp is None


def _calibrated(model: torch.nn.Module, samples: list[torch.Tensor]) -> dict[str, Any]:
    """The model prepared by XNNPACK's own quantizer ("stock", with deployc's config) and by deployc's
    ("ours"), each calibrated on the same samples."""
    from executorch.backends.xnnpack.quantizer.xnnpack_quantizer import (
        XNNPACKQuantizer,
        get_symmetric_quantization_config,
    )
    from torchao.quantization.pt2e.quantize_pt2e import prepare_pt2e

    stock = XNNPACKQuantizer().set_global(get_symmetric_quantization_config(is_per_channel=True))
    ours = BACKEND.quantizer(Recipe(scheme="w8a8", method="pt2e"), {})
    out = {}
    for name, quantizer in (("stock", stock), ("ours", ours)):
        prepared = prepare_pt2e(torch.export.export(model, (samples[0],)).module(), float_paths_only(quantizer))
        for sample in samples:
            prepared(sample)
        out[name] = prepared
    return out


def test_observing_after_the_clamp_gains_snr_on_a_mobilenet() -> None:
    """The simulated int8 model (convert_pt2e), deployc's quantizer against XNNPACK's own with the same
    config, calibrated and judged on the same samples: each of the four judged inputs gains."""
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e

    from deployc.graph.metrics import compare

    model = testnets.mobile_blocks()
    generator = torch.Generator().manual_seed(0)
    samples = [torch.rand(1, 3, 16, 16, generator=generator) * 2 - 1 for _ in range(12)]
    sqnr = {}
    for name, prepared in _calibrated(model, samples[:8]).items():
        converted = convert_pt2e(prepared)
        with torch.no_grad():
            sqnr[name] = [compare(model(x).numpy(), converted(x).numpy()).sqnr_db for x in samples[8:]]
    gains = [o - s for o, s in zip(sqnr["ours"], sqnr["stock"])]
    assert min(gains) > 1.5 and sum(gains) / len(gains) > 3, (sqnr, gains)  # measured: +1.9 to +6.3 dB


class _Embeddings(torch.nn.Module):
    """ViT's embeddings and first block in small: patches plus positions, a dropout, then the norm and a
    residual addition."""

    def __init__(self) -> None:
        super().__init__()
        self.patches, self.mlp = torch.nn.Linear(8, 8), torch.nn.Linear(8, 8)
        self.positions = torch.nn.Parameter(torch.randn(1, 4, 8))
        self.dropout, self.norm = torch.nn.Dropout(0.1), torch.nn.LayerNorm(8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.dropout(self.patches(x) + self.positions)
        return self.norm(h + self.mlp(self.norm(h)))


class _ConvNeXtBlocks(torch.nn.Module):
    """ConvNeXt's residual additions in small: the first reaches the next norm channels-last (permuted), the
    last is pooled by a mean, then normed."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1, self.conv2 = torch.nn.Conv2d(8, 8, 3, padding=1), torch.nn.Conv2d(8, 8, 3, padding=1)
        self.norm1, self.norm2 = torch.nn.LayerNorm(8), torch.nn.LayerNorm(8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x + self.conv1(x)
        h = self.norm1(h.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)
        h = h + self.conv2(h)
        return self.norm2(h.mean(dim=(2, 3)))


@pytest.mark.parametrize("model,example,layer", [
    (_Embeddings, torch.rand(1, 4, 8), "aten.linear.default"),  # through a dropout
    (_ConvNeXtBlocks, torch.rand(1, 8, 6, 6), "aten.conv2d.default"),  # through a permute, and a pooling mean
])
def test_an_add_that_reaches_a_norm_through_what_keeps_it_the_stream_stays_float(
        model: type[torch.nn.Module], example: torch.Tensor, layer: str) -> None:
    module = _annotate(model().eval(), example)
    adds = [n for n in module.graph.nodes if str(n.target) == "aten.add.Tensor"]
    assert len(adds) == 2 and all(n.meta.get("quantization_annotation") is None for n in adds)
    layers = [n for n in module.graph.nodes if str(n.target) == layer]
    assert len(layers) == 2 and all(n.meta["quantization_annotation"].input_qspec_map for n in layers)


class _Classifier(torch.nn.Module):
    """A hidden layer, then logits read through a reshape (and, with `scores`, a softmax of them too)."""

    def __init__(self, scores: bool = False) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.hidden, self.head, self.scores = torch.nn.Linear(8, 32), torch.nn.Linear(32, 5), scores

    def forward(self, x: torch.Tensor) -> Any:
        logits = self.head(torch.relu(self.hidden(x))).reshape(-1, 5)
        return (logits, logits.softmax(-1)) if self.scores else logits


def _linears(model: torch.nn.Module) -> tuple[list[Any], list[Any]]:
    """Each linear's annotation and each reshape's, after deployc's XNNPACK quantizer annotated the model."""
    module = _annotate(model, torch.rand(1, 8))
    def of(targets: tuple[str, ...]) -> list[Any]:
        return [n.meta.get("quantization_annotation") for n in module.graph.nodes if str(n.target) in targets]
    return of(("aten.linear.default",)), of(("aten.view.default", "aten.reshape.default"))


def test_a_linear_that_writes_an_output_takes_a_dynamic_input_and_writes_float() -> None:
    (hidden, head), [reshape] = _linears(_Classifier())
    assert not any(q.is_dynamic for q in hidden.input_qspec_map.values() if q is not None)  # static, with its relu
    assert head.output_qspec is None and [q.is_dynamic for q in head.input_qspec_map.values()] == [True, False]
    assert reshape is None  # it shared the head's output range; there is none now


def test_a_linear_whose_output_is_also_read_inside_the_model_stays_static() -> None:
    (_, head), _ = _linears(_Classifier(scores=True))  # the softmax reads the logits in the program
    assert head.output_qspec is not None
    assert not any(q.is_dynamic for q in head.input_qspec_map.values() if q is not None)


def test_logits_beyond_the_calibrated_range_are_not_clipped() -> None:
    """A linear classifier calibrated on inputs in [-1, 1], judged on inputs twice as large: XNNPACK's own
    quantizer clips its input and its logits at the ranges its samples saw; deployc's takes the input's
    scale at run time and writes the logits in float. The float fallback's simulation of the run-time scale
    is what convert_pt2e makes."""
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e

    from deployc.graph import sensitivity
    from deployc.graph.metrics import compare

    torch.manual_seed(0)
    model = torch.nn.Linear(8, 5).eval()
    generator = torch.Generator().manual_seed(0)
    samples = [torch.rand(1, 8, generator=generator) * 2 - 1 for _ in range(12)]
    wide = [[2 * x] for x in samples[8:]]
    sqnr = {}
    for name, prepared in _calibrated(model, samples[:8]).items():
        simulated = sensitivity.choose(prepared, wide, sensitivity.Target(0.0, -100.0, budget=0.0)).int8_sqnr_db
        converted = convert_pt2e(prepared)
        with torch.no_grad():
            sqnr[name] = min(compare(model(*x).numpy(), converted(*x).numpy()).sqnr_db for x in wide)
        assert simulated == pytest.approx(sqnr[name], abs=0.05)
    assert sqnr["ours"] > 40 and sqnr["stock"] < 5, sqnr  # measured: 46.5 and 0.3 dB


def _manifest(name: str, factory: str, size: int) -> str:
    """One model from the test nets, built in w8a8 for arduino_q's CPU."""
    return f"""\
apiVersion: deployc/v1
name: {name}
version: 0.1.0
targets: [arduino_q]
models:
  {name}:
    source: {{factory: "models.testnets:{factory}"}}
    inputs:
      x: {{shape: [1, 3, {size}, {size}], range: [-1, 1]}}
    quantization: {{scheme: w8a8}}
    overrides:
      arduino_q: {{unit: cpu}}
"""


@pytest.mark.full  # a second w8a8 build
@pytest.mark.slow
def test_a_padded_pool_builds_in_w8a8_and_verifies(tmp_path: Path) -> None:
    # Before: XNNPACK refused the program at load ("Failed to create StaticConstantPad node ...
    # xnn_status_invalid_parameter"): the pad's input was int8 and its output float.
    built = build_project(tmp_path, _manifest("padded", "padded_pool", 12), "padded.yaml")
    unit = built.unit("padded", "arduino_q")
    assert unit["status"] == "built" and unit["verification"]["status"] == "passed", unit["failure"]
    assert unit["verification"]["metrics"]["min_sqnr_db"] > 25
    assert not any("pad" in op for op in unit["non_delegated_ops"])


@pytest.mark.slow
def test_a_mobilenet_with_relu6_builds_in_w8a8_with_its_clamps_fused_and_verifies(tmp_path: Path) -> None:
    # the conv's output is float in the quantized graph (conv -> clamp -> quantize): XNNPACK must still take
    # all of it, the clamp fused into the int8 conv
    built = build_project(tmp_path, _manifest("mobile", "mobile_blocks", 16), "mobile.yaml")
    unit = built.unit("mobile", "arduino_q")
    assert unit["status"] == "built" and unit["verification"]["status"] == "passed", unit["failure"]
    assert unit["verification"]["metrics"]["min_sqnr_db"] > 35
    assert unit["non_delegated_ops"] == [] or not any("hardtanh" in op or "conv" in op
                                                      for op in unit["non_delegated_ops"])
    # its head writes the output: a dynamic int8 linear, delegated whole (the run-time scale included)
    assert not any("choose_qparams" in op or "linear" in op for op in unit["non_delegated_ops"])
    assert unit["stayed_float"] == []
