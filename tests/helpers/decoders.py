"""Seeded tiny decoders of each architecture deployc's decoder reads, saved as Hugging Face directories with
a word-level tokenizer, and a project around one."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from helpers.projects import make_project

BASE = {"vocab_size": 120, "hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4,
        "num_key_value_heads": 2, "intermediate_size": 64, "max_position_embeddings": 64}
ARCHS: dict[str, tuple[str, str, dict[str, Any]]] = {
    "llama": ("LlamaConfig", "LlamaForCausalLM", {"bos_token_id": 1, "eos_token_id": 2}),
    "llama3": ("LlamaConfig", "LlamaForCausalLM", {
        "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                         "original_max_position_embeddings": 16}, "tie_word_embeddings": True,
        "attention_bias": True}),
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM", {"tie_word_embeddings": True}),
    "qwen3": ("Qwen3Config", "Qwen3ForCausalLM", {"head_dim": 16}),
    "gemma": ("GemmaConfig", "GemmaForCausalLM", {"head_dim": 8}),
    "mistral": ("MistralConfig", "MistralForCausalLM", {"sliding_window": None}),
}
WORDS = ["[PAD]", "<s>", "</s>", "[UNK]", "how", "do", "bees", "find", "flowers", "?", "they", "smell", "them"]


def save_decoder(folder: Path, arch: str = "llama", seed: int = 0) -> Any:
    """A seeded tiny decoder (weights wide enough that its logits are not a tie) and a word-level tokenizer."""
    import torch
    import transformers as T
    from tokenizers import Tokenizer, models, pre_tokenizers

    config, cls, extra = ARCHS[arch]
    torch.manual_seed(seed)
    model = getattr(T, cls)(getattr(T, config)(**BASE, **extra)).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, 0.3)
    model.save_pretrained(folder)
    vocab = {w: i for i, w in enumerate(WORDS)} | {f"w{i}": i for i in range(len(WORDS), BASE["vocab_size"])}
    tk = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tk.pre_tokenizer = pre_tokenizers.Whitespace()
    tk.save(str(folder / "tokenizer.json"))
    return model


def decoder_project(tmp_path: Path, models_text: str, arch: str = "llama") -> Path:
    manifest = make_project(tmp_path / "project", "apiVersion: deployc/v1\nname: t\nversion: 0.1.0\n"
                            "targets: [arduino_q]\nmodels:\n" + models_text, "m.yaml")
    save_decoder(tmp_path / "project" / "hf" / arch, arch)
    return manifest
