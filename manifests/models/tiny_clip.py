"""A CLIP-style dual encoder: an image tower and a text tower that map into one embedding space.

PLACEHOLDER WEIGHTS: no CLIP checkpoint can be installed on the build machines, so by default both
towers come from one tiny CLIP config (transformers' CLIPModel, 2 layers, 64 wide, 32-pixel patches,
MiniLM's 30,522-token WordPiece vocabulary) with weights seeded by deployc. Matching scores are then
meaningless; the plumbing (preprocessing, both towers, the image index, similarity) is what is real.

A real checkpoint: pass its directory (saved with `save_pretrained`, e.g. openai/clip-vit-base-patch32)
as `kwargs: {checkpoint: path/to/clip}` to both factories, point the image stage's `preprocessor` at
its preprocessor_config.json and the tokenizer asset at its tokenizer.json, and set the manifest's
input and output shapes to the checkpoint's (see docs/pipeline.md, "Images and sound").
"""

from __future__ import annotations

import os

import torch
import torch.nn.functional as F
from torch import nn

WORDPIECE_SEP = 102  # [SEP] in MiniLM's vocabulary: the text tower pools the hidden state there


def _clip(checkpoint: str | None, image_size: int) -> nn.Module:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from transformers import CLIPConfig, CLIPModel

    if checkpoint:
        return CLIPModel.from_pretrained(checkpoint, local_files_only=True).eval()
    config = CLIPConfig(
        text_config={"vocab_size": 30522, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
                     "num_attention_heads": 2, "max_position_embeddings": 64, "eos_token_id": WORDPIECE_SEP,
                     "pad_token_id": 0, "bos_token_id": 101},
        vision_config={"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 2,
                       "image_size": image_size, "patch_size": 32},
        projection_dim=64)
    return CLIPModel(config).eval()  # seeded by deployc before the factory runs: both towers agree


class ImageTower(nn.Module):
    def __init__(self, clip: nn.Module) -> None:
        super().__init__()
        self.vision, self.projection = clip.vision_model, clip.visual_projection

    def forward(self, pixel_values: torch.Tensor) -> torch.Tensor:
        return F.normalize(self.projection(self.vision(pixel_values=pixel_values).pooler_output), dim=-1)


class TextTower(nn.Module):
    def __init__(self, clip: nn.Module) -> None:
        super().__init__()
        self.text, self.projection = clip.text_model, clip.text_projection

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        pooled = self.text(input_ids=input_ids, attention_mask=attention_mask).pooler_output
        return F.normalize(self.projection(pooled), dim=-1)


def image(checkpoint: str | None = None, image_size: int = 224) -> nn.Module:
    return ImageTower(_clip(checkpoint, image_size)).eval()


def text(checkpoint: str | None = None, image_size: int = 224) -> nn.Module:
    return TextTower(_clip(checkpoint, image_size)).eval()
