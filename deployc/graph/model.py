"""Instantiate a model from its factory: seeded, eval mode, checkpoint sha256-checked and loaded."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import torch

from deployc.errors import BuildError
from deployc.fingerprint import file_sha256
from deployc.plan import LoadModel


def load_model(step: LoadModel, manifest_dir: Path) -> torch.nn.Module:
    module_name, attr = step.factory.split(":")
    folder = str(manifest_dir.resolve())
    if folder not in sys.path:
        sys.path.insert(0, folder)
    try:
        module = importlib.import_module(module_name)
        factory = getattr(module, attr)
    except (ImportError, AttributeError) as exc:
        raise BuildError(f"cannot load factory {step.factory}: {exc}") from exc
    torch.manual_seed(step.seed)
    model = factory(**step.kwargs)
    if not isinstance(model, torch.nn.Module):
        raise BuildError(f"factory {step.factory} returned {type(model).__name__}, expected a torch.nn.Module")
    if step.checkpoint is not None:
        path = manifest_dir / step.checkpoint
        actual = file_sha256(path)
        if actual != step.checkpoint_sha256:
            raise BuildError(f"checkpoint {step.checkpoint} has sha256 {actual}, the manifest expects "
                             f"{step.checkpoint_sha256}")
        state = torch.load(path, map_location="cpu", weights_only=True)
        if isinstance(state, dict) and "state_dict" in state and isinstance(state["state_dict"], dict):
            state = state["state_dict"]
        model.load_state_dict(state)
    return model.eval()
