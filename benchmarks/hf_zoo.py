"""Tiny Hugging Face models of many architectures, made offline from seeded configs and saved with
save_pretrained (safetensors): what `benchmarks/coverage.py` and the coverage tests build. Nothing is
downloaded; the weights are random, so the figures say whether deployc exports, lowers and reproduces
eager PyTorch for an architecture, not how well a trained model does.

Llama-family decoders (llama, qwen2, qwen3, gemma, mistral) are built as `text-generation`: deployc's KV-cache
decoder, verified at the seq dim's points and by greedy token parity. The other decoders (GPT-2,
GPT-Neo, Phi, OPT, Bloom, Falcon, Gemma 2/3, Phi-3, Granite, SmolLM3, GLM, ...) are architectures deployc's
decoder lacks; they are built as `embedding` models
(their hidden states, mean-pooled), which still exercises their attention and MLP blocks.

PYTORCHCV adds the mobile conv families transformers lacks (MobileNetV3, GhostNet, ShuffleNet, SqueezeNet,
...) from the pytorchcv package's model code (benchmarks/cv_models.py), seeded and scaled the same way,
saved as a checkpoint that a factory source loads.
"""

from __future__ import annotations

import hashlib
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

TEXT = {"vocab_size": 200, "max_position_embeddings": 64}
LAYERS = {"num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 64}
IMAGE = {"image_size": 32, "num_labels": 5}
# Deep, narrow conv nets at the default initializer_range (0.02) output ~1e-27 (MobileNetV2) or exactly 0
# (EfficientNet): nothing to compare. Theirs is set until the outputs are of a usable size (0.1 to 10):
# outside fp16's range (LeViT 2e-11 and DPT 8e-9 at 0.02; TextNet 2e14 and HGNetV2 5e22 at 0.3) every fp16
# program "misses" with cosine ~0 because eager fp16 itself does. A raised range is not enough for the
# deepest: MobileNetV2 (52 convolutions) at 0.3 computes in eager fp16 at 39 dB, MobileViT v2 at 28 dB, and
# MobileViT's activations fall under int8's step; those three are scaled by measurement instead
# (unit_variance), and so is RT-DETR, whose seeded encoder vanishes (1e-25: every query score tied).
# EfficientNet, scaled so, verified in fp16 (49 dB, was 39) but lost its NPU int8 row (16a8w 19.3 dB): it
# keeps its range.
DETECTOR_SIZE = 224  # what deployc feeds a detector whose config has no image_size (docs/manifest.md)
CALIBRATED = ("w8a8", "16a8w", "16a4w")  # static schemes: calibrated on generated samples
_WAVEFORM = {"hidden_size": 32, "conv_dim": (32, 32), "conv_stride": (5, 2), "conv_kernel": (10, 3),
             "num_conv_pos_embeddings": 16, "num_conv_pos_embedding_groups": 4}
# DETR-style detectors on a two-stage transformers ResNet (their default backbone comes from timm)
_DETR = {"use_timm_backbone": False, "use_pretrained_backbone": False, "d_model": 32, "encoder_layers": 1,
         "decoder_layers": 1, "encoder_attention_heads": 4, "decoder_attention_heads": 4, "encoder_ffn_dim": 64,
         "decoder_ffn_dim": 64, "num_queries": 5, "num_labels": 5}


def _resnet_backbone(t: Any) -> Any:
    return t.ResNetConfig(embedding_size=8, hidden_sizes=[8, 16], depths=[1, 1], out_features=["stage2"])


@dataclass(frozen=True)
class Arch:
    name: str  # also the model's name in the manifest
    family: str  # encoder, decoder, vision, audio
    task: str
    make: Callable[[Any], Any]  # transformers module -> an untrained model
    # The seq range on the CPU where the config's 2..64 does not export: the edit deployc's located error
    # gives (docs/benchmarks.md, "Architecture coverage").
    seq: tuple[int, int] | None = None
    # Scale each convolution and linear layer, in the order they run, so that its output has unit variance on
    # sample inputs (LSUV, Mishkin & Matas 2016): the activations of a trained network's normalised layers,
    # instead of the vanishing or exploding ones a seeded deep net has at any one initializer range.
    unit_variance: bool = False
    # A pytorchcv model ("module:function", benchmarks/cv_models.py) instead of a transformers one: built
    # through a factory with its weights as a checkpoint; a 224 x 224 image in, CLASSES logits out.
    pytorchcv: str = ""


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
        attention_types=[[["global", "local"], 1]], window_size=16, bos_token_id=0, eos_token_id=0, **TEXT),
        seq=(2, 63)),
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
        t, "MobileNetV2Config", "MobileNetV2ForImageClassification", depth_multiplier=0.25, **IMAGE),
        unit_variance=True),
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
        neck_hidden_sizes=[8, 8, 16, 16, 24, 24, 48], num_attention_heads=2, num_labels=5), unit_variance=True),
    Arch("mobilevit_v2", "vision", "image-classification", lambda t: _text(  # downsamples 32x: 64 pixels
        t, "MobileViTV2Config", "MobileViTV2ForImageClassification", image_size=64, patch_size=2,
        width_multiplier=0.25, num_labels=5), unit_variance=True),
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
    # Further families a mobile team ships, as far as transformers has them (timm and torchvision cannot be
    # installed beside torch 2.13's CPU build: docs/benchmarks.md, "Architecture coverage").
    Arch("mpnet", "encoder", "embedding", lambda t: _text(
        t, "MPNetConfig", "MPNetModel", hidden_size=32, vocab_size=200, max_position_embeddings=66, **LAYERS)),
    Arch("xlm_roberta", "encoder", "embedding", lambda t: _text(
        t, "XLMRobertaConfig", "XLMRobertaModel", hidden_size=32, vocab_size=200, max_position_embeddings=66,
        pad_token_id=1, **LAYERS)),
    Arch("camembert", "encoder", "embedding", lambda t: _text(
        t, "CamembertConfig", "CamembertModel", hidden_size=32, vocab_size=200, max_position_embeddings=66,
        pad_token_id=1, **LAYERS)),
    Arch("data2vec_text", "encoder", "embedding", lambda t: _text(
        t, "Data2VecTextConfig", "Data2VecTextModel", hidden_size=32, vocab_size=200, max_position_embeddings=66,
        pad_token_id=1, **LAYERS)),
    Arch("mobilebert", "encoder", "embedding", lambda t: _text(
        t, "MobileBertConfig", "MobileBertModel", hidden_size=32, embedding_size=16, intra_bottleneck_size=16,
        true_hidden_size=16, num_feedforward_networks=2, **TEXT, **LAYERS), seq=(3, 64)),
    Arch("squeezebert", "encoder", "embedding", lambda t: _text(
        t, "SqueezeBertConfig", "SqueezeBertModel", hidden_size=32, embedding_size=32, q_groups=2, k_groups=2,
        v_groups=2, post_attention_groups=2, intermediate_groups=2, output_groups=2, **TEXT, **LAYERS)),
    Arch("convbert", "encoder", "embedding", lambda t: _text(
        t, "ConvBertConfig", "ConvBertModel", hidden_size=32, embedding_size=32, head_ratio=2, conv_kernel_size=3,
        **TEXT, **LAYERS)),
    Arch("roformer", "encoder", "embedding", lambda t: _text(
        t, "RoFormerConfig", "RoFormerModel", hidden_size=32, embedding_size=32, **TEXT, **LAYERS)),
    Arch("ernie", "encoder", "embedding", lambda t: _text(
        t, "ErnieConfig", "ErnieModel", hidden_size=32, **TEXT, **LAYERS)),
    Arch("megatron_bert", "encoder", "embedding", lambda t: _text(
        t, "MegatronBertConfig", "MegatronBertModel", hidden_size=32, **TEXT, **LAYERS)),
    Arch("modernbert", "encoder", "embedding", lambda t: _text(
        t, "ModernBertConfig", "ModernBertModel", hidden_size=32, global_attn_every_n_layers=2, local_attention=16,
        pad_token_id=0, bos_token_id=1, eos_token_id=2, cls_token_id=1, sep_token_id=2, **TEXT, **LAYERS)),
    Arch("fnet", "encoder", "embedding", lambda t: _text(  # Fourier mixing instead of attention
        t, "FNetConfig", "FNetModel", hidden_size=32, num_hidden_layers=2, intermediate_size=64, **TEXT)),
    Arch("rembert", "encoder", "embedding", lambda t: _text(
        t, "RemBertConfig", "RemBertModel", hidden_size=32, input_embedding_size=16, output_embedding_size=16,
        **TEXT, **LAYERS)),
    Arch("esm", "encoder", "embedding", lambda t: _text(  # protein language model: 33 tokens
        t, "EsmConfig", "EsmModel", hidden_size=32, vocab_size=33, max_position_embeddings=66, pad_token_id=1,
        mask_token_id=32, **LAYERS)),
    # The full model (its decoder upsamples back to every token): the base model returns half as many
    # positions as tokens, which the embedding task cannot pool with the tokens' mask. Its relative
    # positions are computed from the length in Python, so torch.export specializes it: a static 16.
    Arch("funnel", "encoder", "embedding", lambda t: _text(
        t, "FunnelConfig", "FunnelModel", d_model=32, n_head=4, d_head=8, d_inner=64, block_sizes=[1, 1],
        vocab_size=200), seq=(16, 16)),
    Arch("deberta", "encoder", "embedding", lambda t: _text(
        t, "DebertaConfig", "DebertaModel", hidden_size=32, **TEXT, **LAYERS)),
    Arch("big_bird", "encoder", "embedding", lambda t: _text(
        t, "BigBirdConfig", "BigBirdModel", hidden_size=32, attention_type="original_full", **TEXT, **LAYERS)),
    Arch("qwen3", "decoder", "text-generation", lambda t: _text(
        t, "Qwen3Config", "Qwen3ForCausalLM", hidden_size=32, num_key_value_heads=2, head_dim=8, **TEXT, **LAYERS)),
    Arch("bloom", "decoder", "embedding", lambda t: _text(
        t, "BloomConfig", "BloomModel", hidden_size=32, n_layer=2, n_head=4, vocab_size=200)),
    Arch("falcon", "decoder", "embedding", lambda t: _text(
        t, "FalconConfig", "FalconModel", hidden_size=32, num_hidden_layers=2, num_attention_heads=4, vocab_size=200)),
    Arch("gpt_neox", "decoder", "embedding", lambda t: _text(
        t, "GPTNeoXConfig", "GPTNeoXModel", hidden_size=32, **TEXT, **LAYERS)),
    Arch("gptj", "decoder", "embedding", lambda t: _text(
        t, "GPTJConfig", "GPTJModel", n_embd=32, n_layer=2, n_head=4, rotary_dim=4, vocab_size=200, n_positions=64)),
    Arch("codegen", "decoder", "embedding", lambda t: _text(
        t, "CodeGenConfig", "CodeGenModel", n_embd=32, n_layer=2, n_head=4, rotary_dim=4, vocab_size=200,
        n_positions=64, n_ctx=64)),
    Arch("stablelm", "decoder", "embedding", lambda t: _text(
        t, "StableLmConfig", "StableLmModel", hidden_size=32, num_key_value_heads=4, **TEXT, **LAYERS)),
    Arch("gemma2", "decoder", "embedding", lambda t: _text(
        t, "Gemma2Config", "Gemma2Model", hidden_size=32, num_key_value_heads=2, head_dim=8, **TEXT, **LAYERS)),
    Arch("gemma3", "decoder", "embedding", lambda t: _text(
        t, "Gemma3TextConfig", "Gemma3TextModel", hidden_size=32, num_key_value_heads=2, head_dim=8, sliding_window=16,
        **TEXT, **LAYERS), seq=(16, 64)),
    Arch("phi3", "decoder", "embedding", lambda t: _text(
        t, "Phi3Config", "Phi3Model", hidden_size=32, num_key_value_heads=4, pad_token_id=0, **TEXT, **LAYERS)),
    Arch("granite", "decoder", "embedding", lambda t: _text(
        t, "GraniteConfig", "GraniteModel", hidden_size=32, num_key_value_heads=2, **TEXT, **LAYERS)),
    Arch("olmo2", "decoder", "embedding", lambda t: _text(
        t, "Olmo2Config", "Olmo2Model", hidden_size=32, num_key_value_heads=2, pad_token_id=0, **TEXT, **LAYERS)),
    Arch("starcoder2", "decoder", "embedding", lambda t: _text(
        t, "Starcoder2Config", "Starcoder2Model", hidden_size=32, num_key_value_heads=2, sliding_window=None, **TEXT,
        **LAYERS)),
    Arch("smollm3", "decoder", "embedding", lambda t: _text(
        t, "SmolLM3Config", "SmolLM3Model", hidden_size=32, num_key_value_heads=2, pad_token_id=0, **TEXT, **LAYERS)),
    Arch("glm", "decoder", "embedding", lambda t: _text(
        t, "GlmConfig", "GlmModel", hidden_size=32, num_key_value_heads=2, head_dim=8, pad_token_id=0, **TEXT,
        **LAYERS)),
    Arch("cohere", "decoder", "embedding", lambda t: _text(
        t, "CohereConfig", "CohereModel", hidden_size=32, num_key_value_heads=2, pad_token_id=0, **TEXT, **LAYERS)),
    Arch("xglm", "decoder", "embedding", lambda t: _text(
        t, "XGLMConfig", "XGLMModel", d_model=32, num_layers=2, attention_heads=4, ffn_dim=64, vocab_size=200,
        max_position_embeddings=64)),
    Arch("biogpt", "decoder", "embedding", lambda t: _text(
        t, "BioGptConfig", "BioGptModel", hidden_size=32, **TEXT, **LAYERS)),
    Arch("mobilenet_v1", "vision", "image-classification", lambda t: _text(
        t, "MobileNetV1Config", "MobileNetV1ForImageClassification", depth_multiplier=0.25, initializer_range=0.3,
        **IMAGE)),
    Arch("levit", "vision", "image-classification", lambda t: _text(
        t, "LevitConfig", "LevitForImageClassification", image_size=32, hidden_sizes=[16, 32, 48],
        num_attention_heads=[1, 2, 3], depths=[1, 1, 1], key_dim=[8, 8, 8], patch_size=16, stride=2, kernel_size=3,
        down_ops=[["Subsample", 8, 2, 4, 2, 2], ["Subsample", 8, 4, 4, 2, 2]], num_labels=5, initializer_range=0.2)),
    Arch("poolformer", "vision", "image-classification", lambda t: _text(
        t, "PoolFormerConfig", "PoolFormerForImageClassification", hidden_sizes=[8, 16, 24, 32], depths=[1, 1, 1, 1],
        **IMAGE)),
    # Scaled: seeded as is, its logits moved by 1e-6 from one image to the next (a constant output, which
    # eager fp16 itself rounds to 23-40 dB); scaled, by ~1 and eager fp16 at 52-67 dB.
    Arch("swiftformer", "vision", "image-classification", lambda t: _text(
        t, "SwiftFormerConfig", "SwiftFormerForImageClassification", embed_dims=[8, 16, 24, 32], depths=[1, 1, 1, 1],
        **IMAGE), unit_variance=True),
    Arch("bit", "vision", "image-classification", lambda t: _text(
        t, "BitConfig", "BitForImageClassification", embedding_size=8, hidden_sizes=[8, 16, 24, 32],
        depths=[1, 1, 1, 1], num_groups=4, **IMAGE)),
    Arch("convnext_v2", "vision", "image-classification", lambda t: _text(
        t, "ConvNextV2Config", "ConvNextV2ForImageClassification", num_stages=2, hidden_sizes=[8, 16], depths=[1, 1],
        **IMAGE)),
    Arch("data2vec_vision", "vision", "image-classification", lambda t: _text(
        t, "Data2VecVisionConfig", "Data2VecVisionForImageClassification", patch_size=8, hidden_size=32,
        use_mean_pooling=True, **IMAGE, **LAYERS)),
    Arch("vit_msn", "vision", "image-classification", lambda t: _text(
        t, "ViTMSNConfig", "ViTMSNForImageClassification", patch_size=8, hidden_size=32, **IMAGE, **LAYERS)),
    Arch("ijepa", "vision", "image-classification", lambda t: _text(
        t, "IJepaConfig", "IJepaForImageClassification", patch_size=8, hidden_size=32, **IMAGE, **LAYERS)),
    Arch("textnet", "vision", "image-classification", lambda t: _text(
        t, "TextNetConfig", "TextNetForImageClassification", num_labels=5, initializer_range=0.03)),
    Arch("hgnet_v2", "vision", "image-classification", lambda t: _text(
        t, "HGNetV2Config", "HGNetV2ForImageClassification", num_labels=5, initializer_range=0.08)),
    Arch("pvt_v2", "vision", "image-classification", lambda t: _text(
        t, "PvtV2Config", "PvtV2ForImageClassification", image_size=32, num_encoder_blocks=2, depths=[1, 1],
        sr_ratios=[2, 1], hidden_sizes=[16, 32], patch_sizes=[7, 3], strides=[4, 2], num_attention_heads=[1, 2],
        mlp_ratios=[2, 2], num_labels=5)),
    Arch("clip_vision", "vision", "image-embedding", lambda t: _text(
        t, "CLIPVisionConfig", "CLIPVisionModel", image_size=32, patch_size=8, hidden_size=32, **LAYERS)),
    Arch("siglip_vision", "vision", "image-embedding", lambda t: _text(
        t, "SiglipVisionConfig", "SiglipVisionModel", image_size=32, patch_size=8, hidden_size=32, **LAYERS)),
    Arch("dpt", "vision", "depth-estimation", lambda t: _text(
        t, "DPTConfig", "DPTForDepthEstimation", image_size=32, patch_size=8, hidden_size=32, num_hidden_layers=4,
        num_attention_heads=4, intermediate_size=64, neck_hidden_sizes=[8, 16, 32, 32], fusion_hidden_size=16,
        backbone_out_indices=[0, 1, 2, 3], head_in_index=-1, initializer_range=0.12)),
    Arch("glpn", "vision", "depth-estimation", lambda t: _text(
        t, "GLPNConfig", "GLPNForDepthEstimation", num_encoder_blocks=2, depths=[1, 1], sr_ratios=[2, 1],
        hidden_sizes=[16, 32], patch_sizes=[7, 3], strides=[4, 2], num_attention_heads=[1, 2], mlp_ratios=[2, 2],
        decoder_hidden_size=16, image_size=32)),
    Arch("yolos", "vision", "object-detection", lambda t: _text(
        t, "YolosConfig", "YolosForObjectDetection", image_size=[32, 32], patch_size=8, hidden_size=32,
        num_detection_tokens=5, num_labels=5, **LAYERS)),
    Arch("detr", "vision", "object-detection", lambda t: _text(
        t, "DetrConfig", "DetrForObjectDetection", **_DETR, backbone_config=_resnet_backbone(t))),
    Arch("conditional_detr", "vision", "object-detection", lambda t: _text(
        t, "ConditionalDetrConfig", "ConditionalDetrForObjectDetection", **_DETR, backbone_config=_resnet_backbone(t))),
    Arch("rt_detr", "vision", "object-detection", lambda t: _text(
        t, "RTDetrConfig", "RTDetrForObjectDetection", backbone_config=t.RTDetrResNetConfig(
            embedding_size=8, hidden_sizes=[8, 16, 24, 32], depths=[1, 1, 1, 1],
            out_features=["stage2", "stage3", "stage4"]),
        encoder_in_channels=[16, 24, 32], encoder_hidden_dim=16, d_model=16, encoder_layers=1, decoder_layers=1,
        num_queries=5, num_labels=5, encoder_ffn_dim=32, decoder_ffn_dim=32, num_feature_levels=3, decoder_n_points=2,
        decoder_in_channels=[16, 16, 16], encoder_attention_heads=2, decoder_attention_heads=2,
        anchor_image_size=None), unit_variance=True),
    Arch("wav2vec2_conformer", "audio", "audio-embedding", lambda t: _text(
        t, "Wav2Vec2ConformerConfig", "Wav2Vec2ConformerModel", conv_depthwise_kernel_size=3, **_WAVEFORM, **LAYERS)),
    Arch("unispeech", "audio", "audio-embedding", lambda t: _text(
        t, "UniSpeechConfig", "UniSpeechModel", **_WAVEFORM, **LAYERS)),
    Arch("unispeech_sat", "audio", "audio-embedding", lambda t: _text(
        t, "UniSpeechSatConfig", "UniSpeechSatModel", **_WAVEFORM, **LAYERS)),
    Arch("wavlm", "audio", "audio-embedding", lambda t: _text(t, "WavLMConfig", "WavLMModel", **_WAVEFORM, **LAYERS)),
    Arch("data2vec_audio", "audio", "audio-embedding", lambda t: _text(
        t, "Data2VecAudioConfig", "Data2VecAudioModel", **_WAVEFORM, **LAYERS)),
    Arch("sew", "audio", "audio-embedding", lambda t: _text(
        t, "SEWConfig", "SEWModel", squeeze_factor=2, **_WAVEFORM, **LAYERS)),
    Arch("wav2vec2", "audio", "audio-embedding", lambda t: _text(
        t, "Wav2Vec2Config", "Wav2Vec2Model", **_WAVEFORM, **LAYERS)),
    Arch("hubert", "audio", "audio-embedding", lambda t: _text(
        t, "HubertConfig", "HubertModel", **_WAVEFORM, **LAYERS)),
    Arch("whisper", "audio", "audio-embedding", lambda t: _text(
        t, "WhisperConfig", "WhisperModel", vocab_size=200, d_model=32, encoder_layers=2, decoder_layers=1,
        encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64,
        num_mel_bins=16, max_source_positions=32, max_target_positions=32, pad_token_id=1, bos_token_id=2,
        eos_token_id=3, decoder_start_token_id=2)),
]


def _cv(name: str, model: str) -> Arch:
    """A mobile family transformers lacks, from pytorchcv, scaled to unit variance (seeded, their outputs
    are 0.008 to 4000)."""
    return Arch(name, "vision", "image-classification", lambda _t: None, unit_variance=True, pytorchcv=model)


# The families a mobile team uses that transformers does not have (timm and torchvision do not install beside
# torch 2.13's CPU build): MobileNetV3, GhostNet, ShuffleNet v1/v2, SqueezeNet, EfficientNet-EdgeTPU (the
# Lite family's sibling: no squeeze-excite, ReLU), MnasNet, ProxylessNAS, MixNet, HarDNet, RegNetY, IGCV3,
# YOLO's Darknet-tiny backbone; each at its smallest width pytorchcv has.
PYTORCHCV: list[Arch] = [
    _cv("mobilenet_v3", "mobilenetv3:mobilenetv3_small_w7d20"),
    _cv("ghostnet", "ghostnet:ghostnet"),
    _cv("shufflenet", "shufflenet:shufflenet_g3_wd4"),
    _cv("shufflenet_v2", "shufflenetv2:shufflenetv2_wd2"),
    _cv("squeezenet", "squeezenet:squeezenet_v1_1"),
    _cv("efficientnet_edgetpu", "efficientnetedge:efficientnet_edge_small_b"),
    _cv("mnasnet", "mnasnet:mnasnet_small"),
    _cv("proxylessnas", "proxylessnas:proxylessnas_mobile"),
    _cv("mixnet", "mixnet:mixnet_s"),
    _cv("hardnet", "hardnet:hardnet39ds"),
    _cv("regnet_y", "regnet:regnety002"),
    _cv("igcv3", "igcv3:igcv3_wd4"),
    _cv("darknet_tiny", "darknet:darknet_tiny"),
]
ARCHS += PYTORCHCV
CV_SIZE = 224  # pytorchcv's models pool their last 7 x 7 map: 224-pixel images
CHECKPOINT = "model.safetensors"


def _unit_variance(model: Any, seed: int, samples: int = 8) -> None:
    """LSUV on images in deployc's declared pixel range [-1, 1]: each layer's weight and bias divided by its
    output's standard deviation, a layer at a time (a later layer's input depends on the earlier scales)."""
    import torch

    config = getattr(model, "config", None)
    if config is None:  # pytorchcv
        _unit_variance_in_one_pass(model, torch.rand(2, 3, CV_SIZE, CV_SIZE,
                                                     generator=torch.Generator().manual_seed(seed)) * 2 - 1)
        return
    size = getattr(config, "image_size", DETECTOR_SIZE)
    channels = getattr(config, "num_channels", None) or config.backbone_config.num_channels
    call = lambda images: model(pixel_values=images)  # noqa: E731
    images = torch.rand(samples, channels, size, size,
                        generator=torch.Generator().manual_seed(seed)) * 2 - 1
    layers = [m for m in model.modules() if isinstance(m, (torch.nn.Conv2d, torch.nn.Linear))]
    ran: list[Any] = []  # the order they run in, which is not always the order they were made in (RT-DETR's)
    hooks = [layer.register_forward_hook(lambda m, _i, _o: ran.append(m) if m not in ran else None)
             for layer in layers]
    with torch.no_grad():
        call(images[:1])
    for hook in hooks:
        hook.remove()
    for layer in ran:
        for _ in range(4):  # one pass is exact for a layer followed by nothing nonlinear; a few settle the rest
            outputs: list[torch.Tensor] = []
            hook = layer.register_forward_hook(lambda _m, _i, out, seen=outputs: seen.append(out))
            with torch.no_grad():
                call(images)
            hook.remove()
            std = float(outputs[0].std()) if outputs else 0.0
            if std == 0.0 or abs(std - 1.0) < 0.05:
                break
            with torch.no_grad():
                layer.weight /= std
                if layer.bias is not None:
                    layer.bias /= std


def _unit_variance_in_one_pass(model: Any, images: Any) -> None:
    """LSUV in one forward pass: as each convolution or linear layer runs, its weight and bias are divided by
    its output's std, and so is the output the rest of the pass reads, which is what the scaled layer puts
    out. The same scales as _unit_variance's layer-at-a-time passes to rounding, one pass instead of two
    per layer: on 224-pixel images those took minutes a model (pytorchcv's rows). The transformers rows
    keep the passes: their weights, and the figures measured on them, stay as they are."""
    import torch

    def scale(layer: Any, _inputs: Any, out: Any) -> Any:
        std = float(out.std())
        if std == 0.0:  # a zero-initialised layer (a gate): nothing to scale
            return None
        layer.weight /= std
        if layer.bias is not None:
            layer.bias /= std
        return out / std

    layers = [m for m in model.modules() if isinstance(m, (torch.nn.Conv2d, torch.nn.Linear))]
    hooks = [layer.register_forward_hook(scale) for layer in layers]
    with torch.no_grad():
        model(images)
    for hook in hooks:
        hook.remove()


def save(archs: list[Arch], folder: Path, seed: int = 0) -> dict[str, str]:
    """Save each architecture under folder/<name> (a pytorchcv one as its CHECKPOINT, with cv_models.py, its
    factory, beside `folder`); returns name -> why it could not be made (if any)."""
    import cv_models
    import torch
    import transformers

    problems = {}
    for arch in archs:
        torch.manual_seed(seed)
        try:
            model = cv_models.build(arch.pytorchcv) if arch.pytorchcv else arch.make(transformers)
            if arch.unit_variance:
                _unit_variance(model.eval(), seed)
            if arch.pytorchcv:
                from safetensors.torch import save_file

                (folder / arch.name).mkdir(parents=True, exist_ok=True)
                save_file({k: v.contiguous() for k, v in model.state_dict().items()}, folder / arch.name / CHECKPOINT)
                shutil.copy(Path(cv_models.__file__), folder.parent / "cv_models.py")
            else:
                model.save_pretrained(folder / arch.name)
        except Exception as exc:  # an architecture this transformers cannot make is a coverage result
            problems[arch.name] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
    return problems


UNITS = {"cpu": "arduino_q", "npu": "snapdragon"}  # the unit each coverage row is built on, and its target
NPU_SEQ = 16  # the npu takes static shapes only: text models are built at this many tokens there
NPU_CONTEXT = 64  # decoders on the npu: their static form's context (the zoo's max_position_embeddings)


def manifest(archs: list[Arch], schemes: list[str], folder: str = "hf", samples: int = 16, unit: str = "cpu",
             rows: set[tuple[str, str]] | None = None, root: Path | None = None) -> str:
    """One manifest with every architecture in every scheme (or only the (name, scheme) rows given), on
    arduino_q's CPU (XNNPACK) or on snapdragon's NPU (QNN; text models at a static NPU_SEQ tokens).
    root: the manifest's folder, where save() put `folder`: the pytorchcv rows' checkpoints are hashed."""
    target = UNITS[unit]
    text = f"apiVersion: deployc/v1\nname: coverage\nversion: 0.1.0\ntargets: [{target}]\nmodels:\n"
    for arch in archs:
        static = f", dims: {{seq: {{min: {NPU_SEQ}, max: {NPU_SEQ}}}}}" \
            if unit == "npu" and arch.family in ("encoder", "decoder") else ""
        if unit == "npu" and arch.task == "text-generation":  # the static form: chunks of NPU_SEQ tokens
            static = f", npu: {{prefill: {NPU_SEQ}, context: {NPU_CONTEXT}}}"
        if unit == "cpu" and arch.seq:
            static = f", dims: {{seq: {{min: {arch.seq[0]}, max: {arch.seq[1]}}}}}"
        for scheme in schemes:
            if rows is not None and (arch.name, scheme) not in rows:
                continue
            quantization = f"{{scheme: {scheme}, calibration: {{samples: {samples}}}}}" \
                if scheme in CALIBRATED else scheme
            text += f"  {arch.name}_{scheme}:\n" + (_factory(arch, folder, root) if arch.pytorchcv else (
                f"    task: {arch.task}\n    source: {{huggingface: {folder}/{arch.name}}}\n"))
            text += f"    quantization: {quantization}\n    overrides:\n      {target}: {{unit: {unit}{static}}}\n"
    return text


def _factory(arch: Arch, folder: str, root: Path | None) -> str:
    if root is None:
        raise ValueError(f"{arch.name}: a pytorchcv row needs the manifest's folder (root) to hash its checkpoint")
    path = f"{folder}/{arch.name}/{CHECKPOINT}"
    sha256 = hashlib.sha256((root / path).read_bytes()).hexdigest()
    return (f"    source: {{factory: \"cv_models:build\", kwargs: {{model: \"{arch.pytorchcv}\"}},\n"
            f"             checkpoint: {{path: {path}, sha256: {sha256}}}}}\n"
            f"    inputs:\n      image: {{shape: [1, 3, {CV_SIZE}, {CV_SIZE}], range: [-1.0, 1.0]}}\n")


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
