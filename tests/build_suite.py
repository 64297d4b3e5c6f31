"""The manifest that the build tests share, built once per session (see conftest.py)."""

SUITE = """\
apiVersion: deployc/v1
name: suite
version: 1.0.0
targets: [snapdragon, arduino_q]
models:
  mlp_fp32:
    source: {factory: "models.small:mlp", kwargs: {features: 16, hidden: 32, classes: 4}}
    inputs:
      x: {shape: [batch, 16], range: [-2.0, 2.0]}
    dims:
      batch: {min: 1, max: 4}
    overrides:
      snapdragon: {unit: cpu}
  mlp_8da8w:
    source: {factory: "models.small:mlp"}
    inputs:
      x: {shape: [batch, 64]}
    dims:
      batch: {min: 1, max: 8}
    quantization: 8da8w
  conv_w8a8:
    source: {factory: "models.small:convnet"}
    inputs:
      image: {shape: [1, 3, 16, 16], range: [0.0, 1.0]}
    quantization: {scheme: w8a8, calibration: {samples: 4}}
  encoder_8da4w:
    source: {factory: "models.small:text_encoder", kwargs: {vocab: 500, dim: 64}}
    inputs:
      tokens: {shape: [1, seq], dtype: int64, range: [0, 499]}
    dims:
      seq: {min: 4, max: 32}
    quantization: 8da4w
  tiny:
    source: {factory: "models.small:mlp", kwargs: {features: 16, hidden: 32, classes: 4}}
    inputs:
      x: {shape: [1, 16]}
    overrides:
      arduino_q: {unit: mcu, quantization: w8a8}
"""
