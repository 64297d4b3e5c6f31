"""The manifest that the build tests share, built once per session (see conftest.py)."""

from pathlib import Path


def write_calibration(folder: Path) -> None:
    """calib/conv.pt: 4 samples for the conv net's static int8 calibration (a torch.save'd list)."""
    import torch

    (folder / "calib").mkdir(exist_ok=True)
    g = torch.Generator().manual_seed(7)
    torch.save([[torch.rand(1, 3, 16, 16, generator=g)] for _ in range(4)], folder / "calib" / "conv.pt")

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
    quantization: {scheme: w8a8, calibration: {dataset: calib/conv.pt}}
  encoder_8da4w:
    source: {factory: "models.small:text_encoder", kwargs: {vocab: 500, dim: 64}}
    inputs:
      tokens: {shape: [1, seq], dtype: int64, range: [0, 499]}
    dims:
      seq: {min: 4, max: 32}
    quantization: 8da4w
  two_tower:
    source: {factory: "models.small:two_tower"}
    inputs:
      image: {shape: [1, 3, 16, 16], range: [0.0, 1.0]}
    outputs:
      image_embedding: {shape: [1, 32]}
    methods:
      encode_text:
        inputs:
          tokens: {shape: [1, seq], dtype: int64, range: [0, 499]}
        outputs:
          text_embedding: {shape: [1, 32]}
    dims:
      seq: {min: 2, max: 16}
    constants: {embedding_dim: 32}
    overrides:
      snapdragon: {unit: cpu}
      arduino_q: {quantization: 8da8w}
  tiny:
    source: {factory: "models.small:mlp", kwargs: {features: 16, hidden: 32, classes: 4}}
    inputs:
      x: {shape: [1, 16]}
    overrides:
      arduino_q: {unit: mcu, quantization: w8a8}
"""

# One small model, for tests that build many times (kill points, concurrency, full disk).
TINY = """\
apiVersion: deployc/v1
name: tiny
version: 0.1.0
targets: [arduino_q]
models:
  net:
    source: {factory: "models.small:mlp", kwargs: {features: 8, hidden: 16, classes: 2}}
    inputs:
      x: {shape: [batch, 8]}
    dims:
      batch: {min: 1, max: 4}
"""


# The Snapdragon NPU: a conv net and an attention block in every QNN scheme, calibrated with the
# defaults (8 generated samples, MinMax observers), and a layer the NPU cannot lower in fp16 (it falls
# back to the next unit). Built once per session (conftest.py `npu`).
QNN_SCHEMES = ["fp16", "w8a8", "16a8w", "16a4w"]

QNN_SUITE = """\
apiVersion: deployc/v1
name: npu
version: 1.0.0
targets: [snapdragon]
models:
""" + "".join(f"""\
  conv_{s}:
    source: {{factory: "models.small:convnet"}}
    inputs:
      image: {{shape: [1, 3, 32, 32], range: [0.0, 1.0]}}
    quantization: {s}
  attention_{s}:
    source: {{factory: "models.small:attention_block"}}
    inputs:
      x: {{shape: [1, 32, 64], range: [-1.0, 1.0]}}
    outputs:
      y: {{shape: [1, 32, 64]}}
    quantization: {s}
""" for s in QNN_SCHEMES) + """\
  torch_layer:
    source: {factory: "models.testnets:torch_encoder"}
    inputs:
      x: {shape: [1, 16, 32], range: [-1.0, 1.0]}
    quantization: fp16
  causal_mqa:
    source: {factory: "models.testnets:multi_query"}
    inputs:
      x: {shape: [1, 16, 32], range: [-1.0, 1.0]}
    quantization: fp16
  masked_w8a8:
    source: {factory: "models.testnets:masked_encoder", kwargs: {vocab: 200, dim: 32}}
    inputs:
      input_ids: {shape: [1, 16], dtype: int64, range: [0, 199]}
      attention_mask: {shape: [1, 16], dtype: int64, range: [1, 1]}
    outputs: {embedding: {shape: [1, 32]}}
    quantization: w8a8
  linear_bn_16a8w:
    source: {factory: "models.testnets:linear_batch_norm"}
    inputs:
      x: {shape: [1, 16, 32], range: [-1.0, 1.0]}
    quantization: 16a8w
  fourier_fp16:
    source: {factory: "models.testnets:fourier_mixer"}
    inputs:
      x: {shape: [1, 16, 32], range: [-1.0, 1.0]}
    quantization: fp16
  multi_query_w8a8:
    source: {factory: "models.testnets:multi_query"}
    inputs:
      x: {shape: [1, 16, 32], range: [-1.0, 1.0]}
    quantization: w8a8
  unfold_16a8w:
    source: {factory: "models.testnets:patch_unfold"}
    inputs:
      x: {shape: [1, 32, 8, 8], range: [-1.0, 1.0]}
    quantization: 16a8w
  relu6_16a8w:
    source: {factory: "models.testnets:conv_relu6"}
    inputs:
      x: {shape: [1, 8, 16, 16], range: [-2.0, 2.0]}
    quantization: 16a8w
  batch_norm_fp16:
    source: {factory: "models.testnets:conv_batch_norm"}
    inputs:
      x: {shape: [1, 8, 16, 16], range: [-1.0, 1.0]}
    quantization: fp16
  lone_norm_16a8w:
    source: {factory: "models.testnets:residual_batch_norm"}
    inputs:
      x: {shape: [1, 16, 8, 8], range: [-1.0, 1.0]}
    quantization: 16a8w
  lone_norm_w8a8:
    source: {factory: "models.testnets:residual_batch_norm"}
    inputs:
      x: {shape: [1, 16, 8, 8], range: [-1.0, 1.0]}
    quantization: w8a8
  gather_w8a8:
    source: {factory: "models.testnets:fused_key_value"}
    inputs:
      x: {shape: [1, 16, 32], range: [-1.0, 1.0]}
    quantization: w8a8
  pixel_mask_16a8w:
    source: {factory: "models.testnets:pixel_mask_attention"}
    inputs:
      pixels: {shape: [1, 3, 32, 32], range: [-1.0, 1.0]}
    quantization: 16a8w
  hard_swish_16a8w:
    source: {factory: "models.testnets:conv_hard_swish"}
    inputs:
      x: {shape: [1, 8, 16, 16], range: [-2.0, 2.0]}
    quantization: 16a8w
  mixed_kernels_fp16:
    source: {factory: "models.testnets:mixed_kernels"}
    inputs:
      x: {shape: [1, 64, 14, 14], range: [-1.0, 1.0]}
    quantization: fp16
  squeeze_excite_fp16:
    source: {factory: "models.testnets:squeeze_excite"}
    inputs:
      x: {shape: [1, 16, 16, 16], range: [-1.0, 1.0]}
    quantization: fp16
  conv_norm_swish_fp16:
    source: {factory: "models.testnets:conv_norm_swish"}
    inputs:
      x: {shape: [1, 120, 14, 14], range: [-1.0, 1.0]}
    quantization: fp16
"""
