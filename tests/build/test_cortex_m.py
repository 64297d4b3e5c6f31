"""The microcontroller's programs, computed (#30): a keyword spotter of MLPerf Tiny's DS-CNN shape lowers to
cortex_m kernels only (convolution, depthwise, pooling, linear: none left in float), runs on the host with
ExecuTorch's cortex_m reference kernels and is judged against eager, saying what ran; its arena (with the
CMSIS-NN scratch buffers inside) and flash are reported; an int8-only unit fails a program with operators
left in float, naming them, unless the manifest allows them."""

from __future__ import annotations

import pytest
from helpers.projects import Built, build_project

MANIFEST = """\
apiVersion: deployc/v1
name: mcu
version: 1.0.0
targets: [arduino_q]
models:
  kws:
    source: {factory: "models.small:ds_cnn", kwargs: {channels: 16, blocks: 2}}
    inputs:
      mfcc: {shape: [1, 1, 49, 10], range: [-1.0, 1.0]}
    overrides:
      arduino_q: {unit: mcu, quantization: w8a8}
  gelu:
    source: {factory: "models.testnets:norm_head"}
    inputs:
      x: {shape: [1, 16]}
    overrides:
      arduino_q: {unit: mcu, quantization: w8a8}
  gelu_allowed:
    source: {factory: "models.testnets:norm_head"}
    inputs:
      x: {shape: [1, 16]}
    verify: {allow_float_ops: true}
    overrides:
      arduino_q: {unit: mcu, quantization: w8a8}
"""


@pytest.fixture(scope="module")
def mcu(tmp_path_factory: pytest.TempPathFactory) -> Built:
    return build_project(tmp_path_factory.mktemp("mcu"), MANIFEST, "mcu.yaml", must_pass=False)  # a unit fails


def test_a_keyword_spotter_lowers_to_cortex_m_kernels_only_and_is_computed_on_the_host(mcu: Built) -> None:
    kws = mcu.unit("kws", "arduino_q")
    assert kws["status"] == "built", kws["failure"]
    ops = set(kws["non_delegated_ops"])
    assert {"cortex_m.quantized_conv2d_nhwc.default", "cortex_m.quantized_depthwise_conv2d_nhwc.default",
            "cortex_m.quantized_avg_pool2d_nhwc.default", "cortex_m.quantized_linear.default"} <= ops
    assert not any(op.startswith("aten.convolution") for op in ops)
    assert kws["float_ops"] == []
    v = kws["verification"]
    assert v["status"] == "passed" and v["metrics"]["min_cosine"] > 0.999
    assert v["ran_on"] == "cortex_m reference kernels on this host; not the device runtime"
    assert kws["arm64"] is None  # an MCU, not an arm64 CPU
    # CMSIS-NN's scratch buffers are memory-planned inside the arena the app provides.
    assert 0 < kws["scratch_bytes"] < kws["planned_memory_bytes"]["forward"] < 512 * 1024
    assert kws["size_bytes"] < 64 * 1024


def test_an_int8_only_unit_fails_a_program_with_float_operators_naming_them(mcu: Built) -> None:
    failed = mcu.unit("gelu", "arduino_q")
    assert failed["status"] == "failed" and failed["failure"]["step"] == "int8"
    assert failed["float_ops"] and all(op in failed["failure"]["error"] for op in failed["float_ops"])
    assert any("layer_norm" in op for op in failed["float_ops"])
    assert "models.gelu.verify.allow_float_ops: true" in failed["failure"]["error"]
    allowed = mcu.unit("gelu_allowed", "arduino_q")
    assert allowed["status"] == "built" and allowed["float_ops"] == failed["float_ops"]
    assert mcu.result.code == 1  # the failed unit: no bundle for arduino_q
    assert "arduino_q" in mcu.report["bundles_not_written"]
