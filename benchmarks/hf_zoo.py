"""Tiny Hugging Face models of many architectures, made offline from seeded configs and saved with
save_pretrained (safetensors): what `benchmarks/coverage.py` and the coverage tests build. Nothing is
downloaded; the weights are random, so the figures say whether deployc exports, lowers and reproduces
eager PyTorch for an architecture, not how well a trained model does.

Llama-family decoders (llama, qwen2, gemma, mistral) are built as `text-generation`: deployc's KV-cache
decoder, verified at the seq dim's points and by greedy token parity. The other decoders (GPT-2,
GPT-Neo, Phi, OPT) are architectures deployc's decoder lacks; they are built as `embedding` models
(their hidden states, mean-pooled), which still exercises their attention and MLP blocks.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

TEXT = {"vocab_size": 200, "max_position_embeddings": 64}
LAYERS = {"num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 64}
IMAGE = {"image_size": 32, "num_labels": 5}
# Deep, narrow conv nets at the default initializer_range (0.02) output ~1e-27 (MobileNetV2) or exactly 0
# (EfficientNet): nothing to compare. Theirs is raised until the logits are of a usable size.
CALIBRATED = ("w8a8", "16a8w", "16a4w")  # static schemes: calibrated on generated samples


@dataclass(frozen=True)
class Arch:
    name: str  # also the model's name in the manifest
    family: str  # encoder, decoder, vision, audio
    task: str
    make: Callable[[Any], Any]  # transformers module -> an untrained model


def _text(t: Any, config: str, model: str, **kw: Any) -> Any:
    return getattr(t, model)(getattr(t, config)(**kw))


ARCHS: list[Arch] = [
    Arch("bert", "encoder", "embedding",
         lambda t: _text(t, "BertConfig", "BertModel", hidden_size=32, **TEXT, **LAYERS)),
    Arch("roberta", "encoder", "embedding", lambda t: _text(
        t, "RobertaConfig", "RobertaModel", hidden_size=32, vocab_size=200, max_position_embeddings=66, pad_token_id=1,
        **LAYERS)),
    Arch("distilbert", "encoder", "text-classification", lambda t: _text(
        t, "DistilBertConfig", "DistilBertForSequenceClassification", dim=32, n_layers=2, n_heads=4, hidden_dim=64,
        num_labels=3, **TEXT)),
    Arch("albert", "encoder", "embedding", lambda t: _text(
        t, "AlbertConfig", "AlbertModel", embedding_size=16, hidden_size=32, **TEXT, **LAYERS)),
    Arch("electra", "encoder", "embedding", lambda t: _text(
        t, "ElectraConfig", "ElectraModel", embedding_size=16, hidden_size=32, **TEXT, **LAYERS)),
    Arch("deberta_v2", "encoder", "embedding", lambda t: _text(
        t, "DebertaV2Config", "DebertaV2Model", hidden_size=32, **TEXT, **LAYERS)),
    Arch("gpt2", "decoder", "embedding", lambda t: _text(
        t, "GPT2Config", "GPT2Model", vocab_size=200, n_embd=32, n_layer=2, n_head=4, n_positions=64, bos_token_id=0,
        eos_token_id=0)),
    Arch("gpt_neo", "decoder", "embedding", lambda t: _text(
        t, "GPTNeoConfig", "GPTNeoModel", hidden_size=32, num_layers=2, num_heads=4,
        attention_types=[[["global", "local"], 1]], window_size=16, bos_token_id=0, eos_token_id=0, **TEXT)),
    Arch("llama", "decoder", "text-generation", lambda t: _text(
        t, "LlamaConfig", "LlamaForCausalLM", hidden_size=32, num_key_value_heads=2, **TEXT, **LAYERS)),
    Arch("qwen2", "decoder", "text-generation", lambda t: _text(
        t, "Qwen2Config", "Qwen2ForCausalLM", hidden_size=32, num_key_value_heads=2, **TEXT, **LAYERS)),
    Arch("gemma", "decoder", "text-generation", lambda t: _text(
        t, "GemmaConfig", "GemmaForCausalLM", hidden_size=32, num_key_value_heads=2, head_dim=8, **TEXT, **LAYERS)),
    Arch("phi", "decoder", "embedding", lambda t: _text(t, "PhiConfig", "PhiModel", hidden_size=32, **TEXT, **LAYERS)),
    Arch("opt", "decoder", "embedding", lambda t: _text(
        t, "OPTConfig", "OPTModel", hidden_size=32, ffn_dim=64, num_hidden_layers=2, num_attention_heads=4,
        word_embed_proj_dim=32, **TEXT)),
    Arch("mistral", "decoder", "text-generation", lambda t: _text(
        t, "MistralConfig", "MistralForCausalLM", hidden_size=32, num_key_value_heads=2, sliding_window=None, **TEXT,
        **LAYERS)),
    Arch("vit", "vision", "image-classification", lambda t: _text(
        t, "ViTConfig", "ViTForImageClassification", patch_size=8, hidden_size=32, **IMAGE, **LAYERS)),
    Arch("deit", "vision", "image-classification", lambda t: _text(
        t, "DeiTConfig", "DeiTForImageClassification", patch_size=8, hidden_size=32, **IMAGE, **LAYERS)),
    Arch("beit", "vision", "image-classification", lambda t: _text(
        t, "BeitConfig", "BeitForImageClassification", patch_size=8, hidden_size=32, use_mean_pooling=True,
        **IMAGE, **LAYERS)),
    Arch("swin", "vision", "image-classification", lambda t: _text(
        t, "SwinConfig", "SwinForImageClassification", patch_size=4, embed_dim=16, depths=[1, 1], num_heads=[2, 2],
        window_size=4, **IMAGE)),
    Arch("convnext", "vision", "image-classification", lambda t: _text(
        t, "ConvNextConfig", "ConvNextForImageClassification", num_stages=2, hidden_sizes=[8, 16], depths=[1, 1],
        **IMAGE)),
    Arch("resnet", "vision", "image-classification", lambda t: _text(
        t, "ResNetConfig", "ResNetForImageClassification", embedding_size=8, hidden_sizes=[8, 16], depths=[1, 1],
        **IMAGE)),
    Arch("mobilenet_v2", "vision", "image-classification", lambda t: _text(
        t, "MobileNetV2Config", "MobileNetV2ForImageClassification", depth_multiplier=0.25, initializer_range=0.3,
        **IMAGE)),
    Arch("efficientnet", "vision", "image-classification", lambda t: _text(
        t, "EfficientNetConfig", "EfficientNetForImageClassification", width_coefficient=0.25,
        depth_coefficient=0.25, hidden_dim=320, initializer_range=0.6, **IMAGE)),
    Arch("segformer", "vision", "image-classification", lambda t: _text(
        t, "SegformerConfig", "SegformerForImageClassification", num_encoder_blocks=2, depths=[1, 1],
        sr_ratios=[2, 1], hidden_sizes=[16, 32], num_attention_heads=[1, 2], patch_sizes=[7, 3], strides=[4, 2],
        mlp_ratios=[2, 2], decoder_hidden_size=32, **IMAGE)),
    # Qualcomm's ExecuTorch NPU examples (executorch/examples/qualcomm/oss_scripts/) beyond the above.
    Arch("eurobert", "encoder", "embedding", lambda t: _text(
        t, "EuroBertConfig", "EuroBertModel", hidden_size=32, num_key_value_heads=4, pad_token_id=1, bos_token_id=2,
        eos_token_id=3, mask_token_id=4, **TEXT, **LAYERS)),
    Arch("t5_encoder", "encoder", "embedding", lambda t: _text(
        t, "T5Config", "T5EncoderModel", vocab_size=200, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_heads=4,
        decoder_start_token_id=0)),
    Arch("cvt", "vision", "image-classification", lambda t: _text(  # depth >= stage + 1: transformers indexes by stage
        t, "CvtConfig", "CvtForImageClassification", embed_dim=[8, 16, 32], num_heads=[1, 2, 2], depth=[1, 2, 3],
        mlp_ratio=[2.0, 2.0, 2.0], drop_path_rate=[0.0, 0.0, 0.0], num_labels=5)),
    Arch("dinov2", "vision", "image-classification", lambda t: _text(
        t, "Dinov2Config", "Dinov2ForImageClassification", patch_size=8, hidden_size=32, mlp_ratio=2,
        num_hidden_layers=2, num_attention_heads=4, **IMAGE)),
    Arch("dit", "vision", "image-classification", lambda t: _text(  # DiT is BEiT with DiT's settings
        t, "BeitConfig", "BeitForImageClassification", patch_size=8, hidden_size=32,
        use_absolute_position_embeddings=True, use_relative_position_bias=False, use_mask_token=True,
        use_mean_pooling=True, layer_scale_init_value=0.1, **IMAGE, **LAYERS)),
    Arch("focalnet", "vision", "image-classification", lambda t: _text(
        t, "FocalNetConfig", "FocalNetForImageClassification", patch_size=4, embed_dim=16, depths=[1, 1],
        focal_levels=[2, 2], focal_windows=[3, 3], **IMAGE)),
    Arch("mobilevit", "vision", "image-classification", lambda t: _text(
        t, "MobileViTConfig", "MobileViTForImageClassification", image_size=32, patch_size=2, hidden_sizes=[16, 24, 32],
        neck_hidden_sizes=[8, 8, 16, 16, 24, 24, 48], num_attention_heads=2, num_labels=5, initializer_range=0.3)),
    Arch("mobilevit_v2", "vision", "image-classification", lambda t: _text(  # downsamples 32x: 64 pixels
        t, "MobileViTV2Config", "MobileViTV2ForImageClassification", image_size=64, patch_size=2,
        width_multiplier=0.25, num_labels=5, initializer_range=0.3)),
    Arch("pvt", "vision", "image-classification", lambda t: _text(
        t, "PvtConfig", "PvtForImageClassification", image_size=32, num_encoder_blocks=2, depths=[1, 1],
        sequence_reduction_ratios=[2, 1], hidden_sizes=[16, 32], patch_sizes=[4, 2], strides=[4, 2],
        num_attention_heads=[1, 2], mlp_ratios=[2, 2], num_labels=5)),
    Arch("swin_v2", "vision", "image-classification", lambda t: _text(
        t, "Swinv2Config", "Swinv2ForImageClassification", patch_size=4, embed_dim=16, depths=[1, 1],
        num_heads=[2, 2], window_size=4, **IMAGE)),
    Arch("regnet", "vision", "image-classification", lambda t: _text(
        t, "RegNetConfig", "RegNetForImageClassification", embedding_size=8, hidden_sizes=[8, 16], depths=[1, 1],
        groups_width=8, num_labels=5)),
    Arch("depth_anything", "vision", "depth-estimation", lambda t: t.DepthAnythingForDepthEstimation(
        t.DepthAnythingConfig(backbone_config=t.Dinov2Config(
            patch_size=8, hidden_size=32, num_hidden_layers=4, num_attention_heads=4, image_size=32,
            out_features=["stage1", "stage2", "stage3", "stage4"], reshape_hidden_states=False),
            reassemble_hidden_size=32, neck_hidden_sizes=[8, 16, 32, 32], fusion_hidden_size=16, head_hidden_size=8,
            patch_size=8, initializer_range=0.1))),
    Arch("wav2vec2", "audio", "audio-embedding", lambda t: _text(
        t, "Wav2Vec2Config", "Wav2Vec2Model", hidden_size=32, conv_dim=(32, 32), conv_stride=(5, 2),
        conv_kernel=(10, 3), num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=4, **LAYERS)),
    Arch("hubert", "audio", "audio-embedding", lambda t: _text(
        t, "HubertConfig", "HubertModel", hidden_size=32, conv_dim=(32, 32), conv_stride=(5, 2),
        conv_kernel=(10, 3), num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=4, **LAYERS)),
    Arch("whisper", "audio", "audio-embedding", lambda t: _text(
        t, "WhisperConfig", "WhisperModel", vocab_size=200, d_model=32, encoder_layers=2, decoder_layers=1,
        encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64,
        num_mel_bins=16, max_source_positions=32, max_target_positions=32, pad_token_id=1, bos_token_id=2,
        eos_token_id=3, decoder_start_token_id=2)),
]


def save(archs: list[Arch], folder: Path, seed: int = 0) -> dict[str, str]:
    """Save each architecture under folder/<name>; returns name -> why it could not be made (if any)."""
    import torch
    import transformers

    problems = {}
    for arch in archs:
        torch.manual_seed(seed)
        try:
            arch.make(transformers).save_pretrained(folder / arch.name)
        except Exception as exc:  # an architecture this transformers cannot make is a coverage result
            problems[arch.name] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
    return problems


UNITS = {"cpu": "arduino_q", "npu": "snapdragon"}  # the unit each coverage row is built on, and its target
NPU_SEQ = 16  # the npu takes static shapes only: text models are built at this many tokens there


def manifest(archs: list[Arch], schemes: list[str], folder: str = "hf", samples: int = 16, unit: str = "cpu",
             rows: set[tuple[str, str]] | None = None) -> str:
    """One manifest with every architecture in every scheme (or only the (name, scheme) rows given), on
    arduino_q's CPU (XNNPACK) or on snapdragon's NPU (QNN; text models at a static NPU_SEQ tokens)."""
    target = UNITS[unit]
    text = f"apiVersion: deployc/v1\nname: coverage\nversion: 0.1.0\ntargets: [{target}]\nmodels:\n"
    for arch in archs:
        static = f", dims: {{seq: {{min: {NPU_SEQ}, max: {NPU_SEQ}}}}}" \
            if unit == "npu" and arch.family in ("encoder", "decoder") else ""
        for scheme in schemes:
            if rows is not None and (arch.name, scheme) not in rows:
                continue
            quantization = f"{{scheme: {scheme}, calibration: {{samples: {samples}}}}}" \
                if scheme in CALIBRATED else scheme
            text += (f"  {arch.name}_{scheme}:\n    task: {arch.task}\n"
                     f"    source: {{huggingface: {folder}/{arch.name}}}\n    quantization: {quantization}\n"
                     f"    overrides:\n      {target}: {{unit: {unit}{static}}}\n")
    return text


def error_class(failure: dict | None) -> str:
    """A failure in a few words: the step, and what kind of error."""
    if not failure:
        return ""
    error = failure.get("error", "")
    for needle, label in (("Constraints violated", "dim guard"), ("torch.export rejects", "dim guard"),
                          ("data-dependent", "data-dependent branch"), ("missed", "tolerance"),
                          ("indices must be", "integer path quantized"), ("Expected dtype", "integer path quantized"),
                          ("dtype mismatch", "integer path quantized")):
        if needle in error:
            return f"{failure['step']}: {label}"
    return f"{failure['step']}: {error.split(':')[0][:40]}"
