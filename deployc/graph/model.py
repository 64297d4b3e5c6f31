"""Instantiate a model from its factory or its Hugging Face directory: seeded, eval mode, checkpoint
(a torch.save'd state dict or a .safetensors file) sha256-checked and loaded."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from typing import Any

import torch

from deployc.core.digests import file_sha256
from deployc.core.errors import BuildError
from deployc.graph.position_buckets import constant_position_buckets
from deployc.plan.build_plan import LoadModel


def _from_factory(step: LoadModel, manifest_dir: Path) -> torch.nn.Module:
    assert step.factory is not None
    module_name, attr = step.factory.split(":")
    folder = str(manifest_dir.resolve())
    if folder not in sys.path:
        sys.path.insert(0, folder)
    try:
        module = importlib.import_module(module_name)
        factory = getattr(module, attr)
    except (ImportError, AttributeError) as exc:
        raise BuildError(f"cannot load factory {step.factory}: {exc}") from exc
    model = factory(**step.kwargs)
    if not isinstance(model, torch.nn.Module):
        raise BuildError(f"factory {step.factory} returned {type(model).__name__}, expected a torch.nn.Module")
    return model


def _check_sources(step: LoadModel, directory: Path) -> None:
    """The directory's files must still be what the plan hashed."""
    for f in step.sources:
        if file_sha256(directory / f.path) != f.sha256:
            raise BuildError(f"{directory / f.path} changed since the plan was made")


def _from_gguf(step: LoadModel, manifest_dir: Path) -> torch.nn.Module:
    """A GGUF file's decoder, its weights as llama.cpp dequantizes them."""
    from deployc.core import gguf, gguf_model
    from deployc.graph.decoder import decoder_from_weights
    from deployc.pipeline.asset_sources import gguf_file

    assert step.gguf is not None
    if step.context is None:
        raise BuildError("a decoder from a GGUF file needs its context (constants.max_seq_len)")
    path = gguf_file(step.gguf, manifest_dir)
    if path is None:
        raise BuildError(f"the GGUF file {step.gguf} is gone since the plan was made")
    _check_sources(step, path.parent)
    try:
        f = gguf.read(path)
        config = gguf_model.hf_config(f)
        weights = {k: torch.from_numpy(v) for k, v in gguf_model.state_dict(f).items()}
    except gguf.GgufProblem as exc:
        raise BuildError(str(exc)) from exc
    return decoder_from_weights(config, weights, step.context, str(path))


def _bake_parametrizations(model: torch.nn.Module) -> None:
    """Weight norm (and any torch parametrization) computes a weight from parameters on every call; for
    inference it is a constant, baked here once to the values eager computes. Backends then see a plain
    weight: QNN's conv1d-to-conv2d rewrite reshapes parameters only, and a computed weight made it fail
    ("expected stride to be a single integer value": wav2vec2's and HuBERT's positional convolution)."""
    from torch.nn.utils import parametrize

    for module in model.modules():
        if parametrize.is_parametrized(module):
            parametrizations = module.parametrizations
            assert isinstance(parametrizations, torch.nn.ModuleDict)
            for name in list(parametrizations.keys()):
                parametrize.remove_parametrizations(module, name, leave_parametrized=True)


def _head_norms_on_rows(model: torch.nn.Module) -> None:
    """An RMSNorm normalises its input's last axis. Applied per head to a 4-D [batch, tokens, heads,
    head_dim] tensor (the q/k norms of Gemma 3, Qwen3 and others in transformers), QNN's HTP computes it
    wrongly in fp16 (Gemma 3: 22 dB against eager fp16's 62 dB on the CPU), as it did deployc's own Qwen3
    decoder's: such a call runs on a 2-D view of its rows instead, the same numbers in eager."""
    for module in model.modules():
        if not type(module).__name__.endswith("RMSNorm"):
            continue
        forward = module.forward

        def rows(x: torch.Tensor, *args: Any, _forward: Any = forward, **kwargs: Any) -> Any:
            if x.dim() < 4:
                return _forward(x, *args, **kwargs)
            return _forward(x.reshape(-1, x.shape[-1]), *args, **kwargs).reshape(x.shape)

        module.forward = rows


def load_model(step: LoadModel, manifest_dir: Path) -> torch.nn.Module:
    torch.manual_seed(step.seed)
    if step.gguf is not None:
        model = _from_gguf(step, manifest_dir)
    elif step.huggingface is not None:
        from deployc.graph.hf_model import load_directory

        directory = manifest_dir / step.huggingface
        _check_sources(step, directory)
        model = load_directory(directory, step.task, step.context)
    else:
        model = _from_factory(step, manifest_dir)
    if step.checkpoint is not None:
        path = manifest_dir / step.checkpoint
        actual = file_sha256(path)
        if actual != step.checkpoint_sha256:
            raise BuildError(f"checkpoint {step.checkpoint} has sha256 {actual}, the manifest expects "
                             f"{step.checkpoint_sha256}")
        if path.suffix == ".safetensors":
            from safetensors.torch import load_file

            state = load_file(str(path))
        else:
            state = torch.load(path, map_location="cpu", weights_only=True)
        if isinstance(state, dict) and "state_dict" in state and isinstance(state["state_dict"], dict):
            state = state["state_dict"]
        try:
            model.load_state_dict(state)
        except RuntimeError as exc:  # missing keys, unexpected keys, shape mismatches
            first = next(iter(str(exc).strip().splitlines()), "")
            raise BuildError(f"checkpoint {step.checkpoint} does not fit the model: {first[:400]}") from exc
    _bake_parametrizations(model)
    _head_norms_on_rows(model)
    constant_position_buckets(model)
    # Inference only. Parameters that require grad make lowering refuse in-place buffer updates (a
    # KV cache written with index_copy_: "a leaf Variable that requires grad is being used in an
    # in-place operation").
    return model.eval().requires_grad_(False)
