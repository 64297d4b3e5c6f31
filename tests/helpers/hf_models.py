"""Tiny seeded Hugging Face models of four architectures, saved at test time (nothing is downloaded)."""

from __future__ import annotations

from pathlib import Path


def save_tiny_models(folder: Path) -> None:
    """Seeded tiny configs of four architectures, saved as safetensors, and a word-level tokenizer."""
    import torch
    import transformers as T
    from tokenizers import Tokenizer, models, pre_tokenizers

    torch.manual_seed(0)
    T.BertModel(T.BertConfig(vocab_size=200, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                             intermediate_size=64, max_position_embeddings=64)).save_pretrained(folder / "bert")
    T.DistilBertForSequenceClassification(T.DistilBertConfig(
        vocab_size=200, dim=32, n_layers=2, n_heads=4, hidden_dim=64, max_position_embeddings=64,
        num_labels=3)).save_pretrained(folder / "distilbert")
    T.ViTForImageClassification(T.ViTConfig(image_size=32, patch_size=8, hidden_size=32, num_hidden_layers=2,
                                            num_attention_heads=4, intermediate_size=64,
                                            num_labels=5)).save_pretrained(folder / "vit")
    T.Wav2Vec2Model(T.Wav2Vec2Config(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
                                     conv_dim=(32, 32), conv_stride=(5, 2), conv_kernel=(10, 3),
                                     num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=4)
                    ).save_pretrained(folder / "wav2vec2")
    vocab = {w: i for i, w in enumerate(["[PAD]", "[UNK]", "how", "do", "bees", "find", "flowers", "?"])}
    tk = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tk.pre_tokenizer = pre_tokenizers.Whitespace()
    tk.save(str(folder / "bert" / "tokenizer.json"))
