"""A GGUF file as a model: its Hugging Face config, its tokenizer and chat template, its weights under the
names of a Hugging Face checkpoint, and a folder that shows the first three as a Hugging Face directory
does (config.json, tokenizer.json, tokenizer_config.json), so that everything that reads a directory
reads a GGUF file too. The weights stay in the file; the folder is named by the file's sha256."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from deployc.core.atomic import open_atomic
from deployc.core.gguf import GgufFile, GgufProblem, read_tensor

if TYPE_CHECKING:  # the weights' side (the build's): the header's side (validate, plan) needs no numpy
    import numpy as np

ARCHITECTURES = ("llama",)
# Bumped when what the folder holds changes: old folders are then made again.
VIEW_VERSION = 1

_LAYER = re.compile(r"^blk\.(\d+)\.(.+)$")
_LAYER_NAMES = {
    "attn_norm.weight": "input_layernorm.weight", "ffn_norm.weight": "post_attention_layernorm.weight",
    "attn_q.weight": "self_attn.q_proj.weight", "attn_k.weight": "self_attn.k_proj.weight",
    "attn_v.weight": "self_attn.v_proj.weight", "attn_output.weight": "self_attn.o_proj.weight",
    "ffn_gate.weight": "mlp.gate_proj.weight", "ffn_up.weight": "mlp.up_proj.weight",
    "ffn_down.weight": "mlp.down_proj.weight",
}
_TOP_NAMES = {"token_embd.weight": "model.embed_tokens.weight", "output_norm.weight": "model.norm.weight",
              "output.weight": "lm_head.weight"}


def checkpoint_name(gguf_name: str) -> str | None:
    """The Hugging Face checkpoint's name of a GGUF tensor, None for one deployc cannot place."""
    if gguf_name in _TOP_NAMES:
        return _TOP_NAMES[gguf_name]
    m = _LAYER.match(gguf_name)
    if m and m.group(2) in _LAYER_NAMES:
        return f"model.layers.{m.group(1)}.{_LAYER_NAMES[m.group(2)]}"
    return None


def hf_config(f: GgufFile) -> dict[str, Any]:
    """The Hugging Face config.json this file's metadata stands for (a Llama's), checked."""
    arch = f.architecture
    if arch not in ARCHITECTURES:
        raise GgufProblem(f"{f.path.name}: architecture {arch or '(none)'!r}; deployc builds GGUF files of "
                          f"{', '.join(ARCHITECTURES)}")
    heads = f.get(f"{arch}.attention.head_count", int)
    hidden = f.get(f"{arch}.embedding_length", int)
    unknown = sorted(t.name for t in f.tensors if checkpoint_name(t.name) is None)
    if unknown:
        raise GgufProblem(f"{f.path.name}: tensor {unknown[0]} has no place in a {arch} decoder"
                          + (f" ({len(unknown) - 1} more)" if len(unknown) > 1 else ""))
    tokens = f.get("tokenizer.ggml.tokens", list)
    layers = f.get(f"{arch}.block_count", int)
    config: dict[str, Any] = {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama",
        "vocab_size": f.get(f"{arch}.vocab_size", int, len(tokens)),
        "hidden_size": hidden, "intermediate_size": f.get(f"{arch}.feed_forward_length", int),
        "num_hidden_layers": layers, "num_attention_heads": heads,
        "num_key_value_heads": f.get(f"{arch}.attention.head_count_kv", int, heads),
        "head_dim": f.get(f"{arch}.rope.dimension_count", int, hidden // heads),
        "max_position_embeddings": f.get(f"{arch}.context_length", int),
        "rms_norm_eps": f.get(f"{arch}.attention.layer_norm_rms_epsilon", float),
        "rope_theta": float(f.get(f"{arch}.rope.freq_base", (int, float), 10000.0)),
        "hidden_act": "silu", "tie_word_embeddings": f.tensor("output.weight") is None,
        "bos_token_id": f.get("tokenizer.ggml.bos_token_id", int, -1),
        "eos_token_id": f.get("tokenizer.ggml.eos_token_id", int, -1),
    }
    for key in ("bos_token_id", "eos_token_id"):
        if config[key] < 0:
            del config[key]
    if f.metadata.get(f"{arch}.rope.scaling.type") not in (None, "none"):
        raise GgufProblem(f"{f.path.name}: rope scaling {f.metadata[f'{arch}.rope.scaling.type']!r} is not "
                          "read by deployc yet")
    _check_shapes(f, config)
    return config


def _check_shapes(f: GgufFile, c: dict[str, Any]) -> None:
    """Every tensor the decoder needs is there, in the shape the metadata implies."""
    hidden, head_dim = c["hidden_size"], c["head_dim"]
    q, kv = c["num_attention_heads"] * head_dim, c["num_key_value_heads"] * head_dim
    want = {"token_embd.weight": (c["vocab_size"], hidden), "output_norm.weight": (hidden,)}
    for i in range(c["num_hidden_layers"]):
        want.update({f"blk.{i}.attn_norm.weight": (hidden,), f"blk.{i}.ffn_norm.weight": (hidden,),
                     f"blk.{i}.attn_q.weight": (q, hidden), f"blk.{i}.attn_k.weight": (kv, hidden),
                     f"blk.{i}.attn_v.weight": (kv, hidden), f"blk.{i}.attn_output.weight": (hidden, q),
                     f"blk.{i}.ffn_gate.weight": (c["intermediate_size"], hidden),
                     f"blk.{i}.ffn_up.weight": (c["intermediate_size"], hidden),
                     f"blk.{i}.ffn_down.weight": (hidden, c["intermediate_size"])})
    if not c["tie_word_embeddings"]:
        want["output.weight"] = (c["vocab_size"], hidden)
    for name, shape in want.items():
        t = f.tensor(name)
        if t is None:
            raise GgufProblem(f"{f.path.name}: tensor {name} is missing")
        if t.shape != shape:
            raise GgufProblem(f"{f.path.name}: tensor {name} is {list(t.shape)}, the metadata implies {list(shape)}")


def _unpermute(w: np.ndarray, heads: int) -> np.ndarray:
    """llama.cpp's converter interleaves each head's rotary halves in q and k; the checkpoint has them apart."""
    rows = w.shape[0]
    return w.reshape(heads, rows // heads // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def state_dict(f: GgufFile, progress: Callable[[int], None] | None = None) -> dict[str, np.ndarray]:
    """The weights, dequantized to float32 as llama.cpp does, under the checkpoint's names."""
    c = hf_config(f)
    out: dict[str, np.ndarray] = {}
    for i, t in enumerate(f.tensors):
        name = checkpoint_name(t.name)
        assert name is not None  # hf_config refused the others
        w = read_tensor(f, t)
        if t.name.endswith("attn_q.weight"):
            w = _unpermute(w, c["num_attention_heads"])
        elif t.name.endswith("attn_k.weight"):
            w = _unpermute(w, c["num_key_value_heads"])
        out[name] = w
        if progress is not None:
            progress(i)
    return out


def _special(f: GgufFile, key: str) -> str | None:
    tokens = f.metadata.get("tokenizer.ggml.tokens") or []
    i = f.metadata.get(f"tokenizer.ggml.{key}")
    return str(tokens[i]) if isinstance(i, int) and 0 <= i < len(tokens) else None


def tokenizer_config(f: GgufFile) -> dict[str, Any]:
    """tokenizer_config.json's fields: the special tokens and the chat template, as the file gives them."""
    config: dict[str, Any] = {name: _special(f, key) for name, key in (
        ("bos_token", "bos_token_id"), ("eos_token", "eos_token_id"), ("unk_token", "unknown_token_id"),
        ("pad_token", "padding_token_id"))}
    template = f.metadata.get("tokenizer.chat_template")
    if template is not None:
        config["chat_template"] = str(template)
    config["add_bos_token"] = bool(f.metadata.get("tokenizer.ggml.add_bos_token", False))
    return config


def tokenizer_json(f: GgufFile) -> str:
    """The file's vocabulary as a Hugging Face tokenizer.json, made by transformers' GGUF converter (which
    needs no torch)."""
    from transformers.integrations.gguf.gguf_tokenizer_mapping import convert_gguf_tokenizer

    renames = {"model": "tokenizer_type", "pre": "pre_tokenizer_type", "tokens": "tokens", "scores": "scores",
               "token_type": "token_type", "merges": "merges", "bos_token_id": "bos_token_id",
               "eos_token_id": "eos_token_id", "unknown_token_id": "unk_token_id",
               "padding_token_id": "pad_token_id", "add_space_prefix": "add_prefix_space"}
    given = {name: f.metadata[f"tokenizer.ggml.{key}"] for key, name in renames.items()
             if f"tokenizer.ggml.{key}" in f.metadata}
    if "tokens" not in given or "tokenizer_type" not in given:
        raise GgufProblem(f"{f.path.name}: metadata tokenizer.ggml.tokens and tokenizer.ggml.model are needed "
                          "for its tokenizer")
    try:
        tokenizer, _ = convert_gguf_tokenizer(f.architecture, given)
    except (ValueError, KeyError, TypeError) as exc:
        raise GgufProblem(f"{f.path.name}: its tokenizer cannot be read: {exc}") from exc
    return str(tokenizer.to_str())


def view(f: GgufFile, sha256: str, root: Path) -> Path:
    """root/gguf/<sha>/: config.json, tokenizer.json, tokenizer_config.json of this file, made once."""
    folder = root / "gguf" / sha256[:2] / f"{sha256}-v{VIEW_VERSION}"
    files = {"config.json": lambda: json.dumps(hf_config(f), indent=2, sort_keys=True),
             "tokenizer_config.json": lambda: json.dumps(tokenizer_config(f), indent=2, sort_keys=True),
             "tokenizer.json": lambda: tokenizer_json(f)}
    for name, make in files.items():
        path = folder / name
        if not path.is_file():
            folder.mkdir(parents=True, exist_ok=True)
            with open_atomic(path) as out:
                out.write(make().encode("utf-8"))
    return folder
