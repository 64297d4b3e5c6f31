"""Hugging Face model directories on the torch side: the transformers class a task needs, loaded
offline from safetensors, wrapped so the program takes and returns plain tensors."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch
from torch import nn

from deployc.core.errors import BuildError


class TextEmbedding(nn.Module):
    """Mean of the last hidden states over the attention mask, L2-normalised (sentence embeddings)."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        hidden = self.model(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        mask = torch.where(attention_mask != 0, 1.0, 0.0).unsqueeze(-1).to(hidden.dtype)
        pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
        return nn.functional.normalize(pooled, dim=1)


class TextLogits(nn.Module):
    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return self.model(input_ids=input_ids, attention_mask=attention_mask).logits


class ImageLogits(nn.Module):
    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, pixel_values: torch.Tensor) -> torch.Tensor:
        return self.model(pixel_values=pixel_values).logits


def _pool(out: Any) -> torch.Tensor:
    """An encoder's embedding: its pooler output where it has one, else the mean of its last hidden
    states over every position (tokens, patches, frames, or pixels of a feature map)."""
    pooled = getattr(out, "pooler_output", None)
    if pooled is not None:
        return pooled.flatten(1)
    hidden = out.last_hidden_state
    return hidden.mean(dim=1) if hidden.dim() == 3 else hidden.flatten(2).mean(dim=2)


class ImageEmbedding(nn.Module):
    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, pixel_values: torch.Tensor) -> torch.Tensor:
        return _pool(self.model(pixel_values=pixel_values))


class DepthMap(nn.Module):
    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, pixel_values: torch.Tensor) -> torch.Tensor:
        return self.model(pixel_values=pixel_values).predicted_depth


class Detections(nn.Module):
    """DETR-style detectors: per query slot, class scores and a box (cx, cy, w, h, relative to the image)."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, pixel_values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        out = self.model(pixel_values=pixel_values)
        return out.logits, out.pred_boxes


class WaveformEmbedding(nn.Module):
    """wav2vec2-style encoders: raw 16 kHz samples in."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_values: torch.Tensor) -> torch.Tensor:
        return _pool(self.model(input_values=input_values))


class FeaturesEmbedding(nn.Module):
    """Whisper-style encoders: log-mel features in."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_features: torch.Tensor) -> torch.Tensor:
        return _pool(self.model(input_features=input_features))


def load_directory(folder: Path, task: str, context: int | None = None) -> nn.Module:
    if task == "text-generation":  # deployc's own KV-cache decoder, not transformers' (see decoder.py)
        from deployc.graph.decoder import load_decoder

        if context is None:
            raise BuildError("a decoder from a directory needs its context (constants.max_seq_len)")
        return load_decoder(folder, context)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    import transformers

    classes = {"embedding": transformers.AutoModel,
               "text-classification": transformers.AutoModelForSequenceClassification,
               "image-classification": transformers.AutoModelForImageClassification,
               "image-embedding": transformers.AutoModel,
               "depth-estimation": transformers.AutoModelForDepthEstimation,
               "object-detection": transformers.AutoModelForObjectDetection,
               "audio-embedding": transformers.AutoModel}
    if task not in classes:
        raise BuildError(f"task {task} cannot be built from a Hugging Face directory yet")
    loader = classes[task]
    if task == "embedding":  # an encoder saved alone (T5EncoderModel): AutoModel would add a random decoder
        from deployc.load.hf_directory import read

        names = read(folder).config.get("architectures") or [""]
        named = names[0] if isinstance(names, list) and isinstance(names[0], str) else ""
        if named.endswith("EncoderModel") and hasattr(transformers, named):
            loader = getattr(transformers, named)
    try:
        model = loader.from_pretrained(str(folder), local_files_only=True, trust_remote_code=False,
                                              use_safetensors=True)
    except (OSError, ValueError, KeyError, RuntimeError) as exc:
        first = next(iter(str(exc).strip().splitlines()), type(exc).__name__)
        raise BuildError(f"transformers cannot load {folder} for task {task}: {first[:400]}") from exc
    model.eval()
    if getattr(model.config, "use_cache", False):
        # Every task here reads one pass: a decoder's KV cache would only concatenate each layer's keys and
        # values to an empty past (on QNN's HTP in int8 that empty concatenation crashed Falcon's graph compile).
        model.config.use_cache = False
    if task == "embedding":
        # An encoder-decoder (T5) embeds with its encoder: the decoder would need decoder ids to run at all.
        # By the config's flag: Funnel's `decoder` upsamples its own encoder's output and needs no ids.
        encoder_decoder = bool(getattr(model.config, "is_encoder_decoder", False)) and hasattr(model, "get_encoder")
        return TextEmbedding(model.get_encoder() if encoder_decoder else model)
    if task == "text-classification":
        return TextLogits(model)
    if task == "image-classification":
        return ImageLogits(model)
    if task == "image-embedding":
        return ImageEmbedding(model)
    if task == "depth-estimation":
        return DepthMap(model)
    if task == "object-detection":
        return Detections(model)
    if hasattr(model, "get_encoder") and hasattr(model.config, "num_mel_bins"):  # an encoder-decoder (Whisper)
        return FeaturesEmbedding(model.get_encoder())
    return WaveformEmbedding(model)
