"""Mobile vision families from the pytorchcv package (MIT; its own model code, no weights downloaded), the
factory the coverage zoo's non-transformers rows are built from (benchmarks/hf_zoo.py, PYTORCHCV).
pytorchcv's metadata asks for torchvision, which PyPI has only as a CUDA build for torch 2.13; the model
modules used here import none of it, so `make install` installs pytorchcv without its dependencies, and
each module is imported by itself (pytorchcv's model_provider imports every model, one of them needs
torchvision)."""

from __future__ import annotations

import importlib

from torch import nn

CLASSES = 5  # as the transformers rows' num_labels


def build(model: str) -> nn.Module:
    """`model`: pytorchcv's module and function, e.g. "mobilenetv3:mobilenetv3_small_w7d20"; untrained, with
    CLASSES outputs (the zoo loads its scaled weights over these: `source.checkpoint`)."""
    module, function = model.split(":")
    made = getattr(importlib.import_module(f"pytorchcv.models.{module}"), function)
    return made(pretrained=False, num_classes=CLASSES).eval()
