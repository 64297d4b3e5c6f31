"""Hugging Face model directories (config.json, *.safetensors, tokenizer files), read without importing
transformers or torch: what the directory holds, whether deployc can load it offline, and the inputs,
outputs, dims (and, for decoders, constants) a task implies when a manifest leaves them out. validate
and plan call this; the build loads the model with transformers (deployc/graph/hf.py), or a decoder
with deployc's own KV-cache decoder (deployc/graph/decoder.py)."""

from __future__ import annotations

import functools
import importlib.util
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from deployc.core.errors import DeploycError
from deployc.core.records import GgufRef
from deployc.pipeline.asset_sources import gguf_file, gguf_problem, gguf_view

if TYPE_CHECKING:
    from deployc.load.manifest import Source

# What each task makes of a directory. The manifest's `task` picks one; the build wraps the matching
# transformers class so that the program takes and returns plain tensors.
TASKS = ("embedding", "text-classification", "text-generation", "image-classification", "image-embedding",
         "depth-estimation", "object-detection", "audio-embedding")
TEXT_TASKS = ("embedding", "text-classification", "text-generation")
IMAGE_TASKS = ("image-classification", "image-embedding", "depth-estimation", "object-detection")
# Detectors that score a "no object" class beside the labels (a softmax over num_labels + 1); the others
# (Conditional/Deformable DETR, RT-DETR, D-FINE) score each label alone (sigmoid).
_NO_OBJECT_CLASS = {"detr", "table-transformer", "yolos"}

# Models whose position ids start after the padding index: two positions fewer than the table holds.
_OFFSET_POSITIONS = {"roberta", "xlm-roberta", "camembert", "longformer", "bart", "mbart", "data2vec-text", "mpnet",
                     "esm"}


@dataclass(frozen=True)
class HfModel:
    folder: Path
    config: dict[str, Any]
    weights: tuple[Path, ...]  # *.safetensors, and the shard index when there is one; or the GGUF file
    gguf: bool = False  # folder is a GGUF file's view; the weights are the file's


    @property
    def model_type(self) -> str:
        return str(self.config.get("model_type", ""))

    def files(self) -> list[Path]:
        """Everything that decides the loaded model: the config, the weights, the generation config."""
        if self.gguf:  # the view is made from the file: the file alone decides the model
            return list(self.weights)
        extra = [self.folder / "generation_config.json"]
        return [self.folder / "config.json", *self.weights, *(f for f in extra if f.is_file())]


class HfProblem(DeploycError):
    """What is wrong with a directory; the caller locates it (the manifest field, or init's argument). Exit 2."""

    exit_code = 2


@functools.cache
def known_model_types() -> frozenset[str]:
    """The `model_type`s the installed transformers knows, read from its source (importing it imports
    torch). Empty when it cannot be read: then nothing is refused for being unknown."""
    try:
        spec = importlib.util.find_spec("transformers")
    except (ImportError, ValueError):
        return frozenset()
    types: set[str] = set()
    for root in (spec.submodule_search_locations or []) if spec else []:
        for name in ("auto_mappings.py", "configuration_auto.py"):
            f = Path(root, "models", "auto", name)
            if f.is_file():
                text = f.read_text(errors="replace")
                types.update(re.findall(r'\(\s*"([\w-]+)"\s*,\s*"\w+Config"\s*\)', text))
                types.update(re.findall(r'"([\w-]+)"\s*:\s*"\w+Config"', text))
    return frozenset(types)


def read(folder: Path) -> HfModel:
    """The directory, checked for what an offline load needs; raises HfProblem saying what is missing."""
    if not folder.is_dir():
        raise HfProblem(f"no directory {folder}")
    config_file = folder / "config.json"
    if not config_file.is_file():
        raise HfProblem(f"{folder} has no config.json (is it a Hugging Face model directory?)")
    try:
        config = json.loads(config_file.read_text())
    except (ValueError, UnicodeDecodeError) as exc:
        raise HfProblem(f"{config_file} is not valid JSON: {exc}") from None
    if not isinstance(config, dict):
        raise HfProblem(f"{config_file} does not hold a JSON object")
    if "auto_map" in config:
        raise HfProblem(f"{config_file} names custom model code (auto_map); deployc never runs code from a model "
                        "directory (trust_remote_code is refused)")
    model_type = config.get("model_type")
    if not isinstance(model_type, str) or not model_type:
        raise HfProblem(f"{config_file} has no model_type")
    known = known_model_types()
    if known and model_type not in known:
        raise HfProblem(f"{config_file}: model_type '{model_type}' is not an architecture the installed transformers "
                        "knows")
    shards = sorted(folder.glob("*.safetensors"))
    if not shards:
        pickled = [p.name for p in folder.glob("*.bin")] + [p.name for p in folder.glob("*.pt")]
        if pickled:
            raise HfProblem(f"{folder} has weights only as {', '.join(sorted(pickled))} (pickle); deployc loads "
                            "safetensors: save them with save_pretrained(..., safe_serialization=True)")
        raise HfProblem(f"{folder} has no *.safetensors weights")
    index = folder / "model.safetensors.index.json"
    return HfModel(folder, config, tuple([*shards, *([index] if index.is_file() else [])]))


def read_gguf(ref: GgufRef, folder: Path) -> HfModel:
    """A GGUF file (relative to `folder`, or in a package) as a directory would show it: its view's config
    and tokenizer, the file for weights; raises HfProblem saying what is wrong with it."""
    problem = gguf_problem(ref, folder)
    path = gguf_file(ref, folder)
    if problem is not None or path is None:
        raise HfProblem(problem or "no GGUF file")
    view = gguf_view(path)
    return HfModel(view, json.loads((view / "config.json").read_text()), (path,), gguf=True)


def source_model(source: Source, folder: Path) -> HfModel:
    """The model a `huggingface` or `gguf` source names, read and checked."""
    if source.gguf is not None:
        return read_gguf(source.gguf, folder)
    assert source.huggingface is not None
    return read(folder / source.huggingface)


def _get(config: dict[str, Any], *names: str) -> Any:
    """The first of `names` set in the config or in its text/vision/backbone sub-config."""
    for source in (config, *(config.get(k) or {} for k in ("text_config", "vision_config", "backbone_config"))):
        for n in names:
            if isinstance(source, dict) and source.get(n) is not None:
                return source[n]
    return None


def _max_positions(model: HfModel) -> int:
    n = _get(model.config, "max_position_embeddings", "n_positions", "max_seq_len", "seq_length")
    if not isinstance(n, int) or n <= 0:
        return 512
    return n - 2 if model.model_type in _OFFSET_POSITIONS else n


def _hidden(model: HfModel) -> int | None:
    sizes = _get(model.config, "hidden_sizes")
    if isinstance(sizes, list) and sizes:
        return int(sizes[-1])
    n = _get(model.config, "hidden_size", "d_model", "n_embd", "dim", "embed_dim")
    return int(n) if isinstance(n, int) else None


def _labels(model: HfModel) -> int:
    id2label = model.config.get("id2label")
    if isinstance(id2label, dict) and id2label:
        return len(id2label)
    n = model.config.get("num_labels")
    return int(n) if isinstance(n, int) else 2


def derive(model: HfModel, task: str) -> dict[str, Any]:
    """What the task implies: {"inputs": ..., "outputs": ..., "dims": ...} as manifest data, plus
    "constants" for text generation."""
    c = model.config
    if task in TEXT_TASKS and task != "text-generation":
        vocab = _get(c, "vocab_size")
        if not isinstance(vocab, int):
            raise HfProblem(f"config.json has no vocab_size, so it is not a text model for task {task}")
        seq = {"min": 2, "max": _max_positions(model)}
        inputs = {"input_ids": {"shape": [1, "seq"], "dtype": "int64", "range": [0, vocab - 1]},
                  "attention_mask": {"shape": [1, "seq"], "dtype": "int64", "range": [1, 1]}}
        if task == "embedding":
            hidden = _hidden(model)
            if hidden is None:
                raise HfProblem("config.json gives no hidden size for the embedding")
            outputs = {"embedding": {"shape": [1, hidden]}}
        else:
            outputs = {"logits": {"shape": [1, _labels(model)]}}
        return {"inputs": inputs, "outputs": outputs, "dims": {"seq": seq}}
    if task in IMAGE_TASKS:
        size = _get(c, "image_size")
        size = size[0] if isinstance(size, list) else size
        size = int(size) if isinstance(size, int) else 224
        channels = _get(c, "num_channels")
        channels = int(channels) if isinstance(channels, int) else 3
        inputs = {"pixel_values": {"shape": [1, channels, size, size], "dtype": "float32", "range": [-1.0, 1.0]}}
        if task == "image-classification":
            outputs = {"logits": {"shape": [1, _labels(model)]}}
        elif task == "depth-estimation":  # one relative depth per pixel of the input
            depth = size
            patch = _get(c, "patch_size")
            if model.model_type == "dpt" and isinstance(patch, int) and not c.get("is_hybrid") \
                    and not c.get("backbone_config"):
                depth = size * 16 // patch  # DPT's neck and head upsample 16x from its patches (patch 16: 1 to 1)
            outputs = {"depth": {"shape": [1, depth, depth]}}
        elif task == "object-detection":  # a fixed set of query slots, each a class score row and a box
            queries = _get(c, "num_queries", "num_detection_tokens")
            if not isinstance(queries, int):
                raise HfProblem("config.json gives no num_queries (or num_detection_tokens) for the detections")
            classes = _labels(model) + (1 if model.model_type in _NO_OBJECT_CLASS else 0)
            outputs = {"logits": {"shape": [1, queries, classes]}, "boxes": {"shape": [1, queries, 4]}}
        else:
            hidden = _hidden(model)
            if hidden is None:
                raise HfProblem("config.json gives no hidden size for the embedding")
            outputs = {"embedding": {"shape": [1, hidden]}}
        return {"inputs": inputs, "outputs": outputs, "dims": {}}
    if task == "audio-embedding":
        hidden = _hidden(model)
        if hidden is None:
            raise HfProblem("config.json gives no hidden size for the embedding")
        mels = c.get("num_mel_bins")
        if isinstance(mels, int):  # Whisper-style encoders take log-mel features: 30 s of them
            frames = 2 * int(c.get("max_source_positions", 1500))
            inputs = {"input_features": {"shape": [1, mels, frames], "dtype": "float32", "range": [-1.0, 1.0]}}
            return {"inputs": inputs, "outputs": {"embedding": {"shape": [1, hidden]}}, "dims": {}}
        # One second at 16 kHz, static: a waveform encoder's convolutions accept only some lengths, which
        # torch.export rejects as a plain range.
        inputs = {"input_values": {"shape": [1, 16000], "dtype": "float32", "range": [-1.0, 1.0]}}
        return {"inputs": inputs, "outputs": {"embedding": {"shape": [1, hidden]}}, "dims": {}}
    if task == "text-generation":
        return _generation(model)
    raise HfProblem(f"task {task} cannot derive inputs; declare them")


# Decoders deployc builds as KV-cache programs (deployc/graph/decoder.py); SmolLM and TinyLlama are llama.
DECODER_TYPES = ("llama", "mistral", "qwen2", "qwen3", "gemma")
_ACTIVATIONS = ("silu", "swish", "gelu", "gelu_pytorch_tanh", "gelu_new")
# A generation program's default context: a real checkpoint's max_position_embeddings (32k, 128k) would
# make a KV cache of gigabytes; set dims.seq.max to change it.
DEFAULT_CONTEXT = 2048


def decoder_config_problem(config: dict[str, Any]) -> str | None:
    """Why deployc cannot build this config as a KV-cache decoder, or None."""
    kind = config.get("model_type")
    if kind not in DECODER_TYPES:
        return (f"text generation from a directory supports the decoder architectures {', '.join(DECODER_TYPES)} "
                f"(SmolLM and TinyLlama are llama); model_type '{kind}' is not one of them")
    for field in ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size"):
        if not isinstance(config.get(field), int):
            return f"config.json has no {field}"
    act = config.get("hidden_activation") or config.get("hidden_act") or "silu"
    if act not in _ACTIVATIONS:
        return f"config.json's activation '{act}' is not one deployc's decoder has ({', '.join(_ACTIVATIONS)})"
    rope = config.get("rope_scaling") or config.get("rope_parameters") or {}
    kind_of_rope = rope.get("rope_type", rope.get("type", "default")) if isinstance(rope, dict) else "default"
    if kind_of_rope not in ("default", "llama3"):
        return f"rotary scaling '{kind_of_rope}' is not supported (default and llama3 are)"
    if isinstance(rope, dict) and rope.get("partial_rotary_factor", 1.0) != 1.0:
        return "partial rotary embeddings are not supported"
    heads, kv = config["num_attention_heads"], config.get("num_key_value_heads") or config["num_attention_heads"]
    if heads % kv:
        return f"num_attention_heads {heads} is not a multiple of num_key_value_heads {kv}"
    return None


def decoder_parameters(config: dict[str, Any]) -> int:
    """A decoder config's weights (decoder_config_problem found none missing): the embedding table, each layer's
    attention, MLP and norms, the final norm and an untied output layer."""
    hidden, layers, inter, vocab = (int(config[k]) for k in ("hidden_size", "num_hidden_layers", "intermediate_size",
                                                             "vocab_size"))
    heads = int(config["num_attention_heads"])
    kv = int(config.get("num_key_value_heads") or heads)
    head_dim = int(config.get("head_dim") or hidden // heads)
    attention = hidden * head_dim * (2 * heads + 2 * kv)
    per_layer = attention + 3 * hidden * inter + 2 * hidden
    tied = config.get("tie_word_embeddings", True) is not False
    return vocab * hidden * (1 if tied else 2) + layers * per_layer + hidden


def _token_ids(value: Any) -> list[int]:
    if isinstance(value, int):
        return [value]
    return [v for v in value if isinstance(v, int)] if isinstance(value, list) else []


def _generation(model: HfModel) -> dict[str, Any]:
    c = model.config
    problem = decoder_config_problem(c)
    if problem:
        raise HfProblem(problem)
    vocab = int(c["vocab_size"])
    context = min(_max_positions(model), DEFAULT_CONTEXT)
    generation: dict[str, Any] = {}
    f = model.folder / "generation_config.json"
    if f.is_file():
        try:
            loaded = json.loads(f.read_text())
            generation = loaded if isinstance(loaded, dict) else {}
        except (ValueError, UnicodeDecodeError) as exc:
            raise HfProblem(f"{f} is not valid JSON: {exc}") from None
    constants: dict[str, Any] = {"vocab_size": vocab, "max_seq_len": context}
    bos = _token_ids(generation.get("bos_token_id", c.get("bos_token_id")))
    if bos:
        constants["bos_id"] = bos[0]
    constants["eos_ids"] = _token_ids(generation.get("eos_token_id", c.get("eos_token_id")))
    inputs = {"tokens": {"shape": [1, "seq"], "dtype": "int64", "range": [0, vocab - 1]},
              "input_pos": {"shape": ["seq"], "dtype": "int64", "fill": "arange"}}
    return {"inputs": inputs, "outputs": {"logits": {"shape": [1, vocab]}}, "dims": {"seq": {"min": 1, "max": context}},
            "constants": constants}


def tokenizer_size(path: Path) -> int | None:
    """How many ids a tokenizer.json hands out (its vocabulary and added tokens: the highest id + 1), read
    as JSON; None when it cannot be read (the tokenizer's own loading says why)."""
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    vocab = (doc.get("model") or {}).get("vocab") if isinstance(doc, dict) else None
    ids: list[int] = []
    if isinstance(vocab, dict):
        ids = [v for v in vocab.values() if isinstance(v, int)]
    elif isinstance(vocab, list):  # Unigram: [piece, score] pairs, ids by position
        ids = [len(vocab) - 1] if vocab else []
    ids += [t["id"] for t in doc.get("added_tokens") or [] if isinstance(t, dict) and isinstance(t.get("id"), int)]
    return max(ids) + 1 if ids else None


def tokenizer_file(folder: Path) -> Path | None:
    f = folder / "tokenizer.json"
    return f if f.is_file() else None
