"""Tiny seeded GGUF files written at test time, as llama.cpp's converter writes them: a Llama's metadata,
a byte-level BPE vocabulary with merges and a chat template, q and k rows interleaved per head, the
linears in Q4_1, the embedding table in Q8_0, the norms in F32."""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any

import numpy as np

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
MERGES = ["h e", "l l", "o w", "he ll", "b e", "e s", "f l", "i n", "Ġ b", "Ġ f"]
TEMPLATE = ("{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
            "{{ '<|im_start|>system\\nYou are helpful.<|im_end|>\\n' }}{% endif %}"
            "{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}"
            "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")
CONFIG = {"hidden": 64, "layers": 1, "heads": 4, "kv_heads": 2, "ffn": 128, "context": 256}


def _bytes_to_unicode() -> list[str]:
    """GPT-2's printable spelling of the 256 byte values."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    order = sorted(zip(bs, cs))
    return [chr(c) for _, c in order]


def vocabulary() -> list[str]:
    tokens = SPECIALS + _bytes_to_unicode()
    tokens += ["".join(m.split(" ")) for m in MERGES]
    return tokens


def _string(s: str) -> bytes:
    raw = s.encode("utf-8")
    return struct.pack("<Q", len(raw)) + raw


def _value(v: Any) -> bytes:
    if isinstance(v, bool):
        return struct.pack("<I?", 7, v)
    if isinstance(v, int):
        return struct.pack("<Ii", 5, v) if v < 0 else struct.pack("<II", 4, v)
    if isinstance(v, float):
        return struct.pack("<If", 6, v)
    if isinstance(v, str):
        return struct.pack("<I", 8) + _string(v)
    assert isinstance(v, list)
    if v and isinstance(v[0], str):
        return struct.pack("<IIQ", 9, 8, len(v)) + b"".join(_string(x) for x in v)
    return struct.pack("<IIQ", 9, 5, len(v)) + np.asarray(v, dtype="<i4").tobytes()


def q4_1(w: np.ndarray) -> bytes:
    """llama.cpp's quantize_row_q4_1: per 32 weights an fp16 scale and minimum, 4-bit codes."""
    blocks = w.astype(np.float32).reshape(-1, 32)
    lo, hi = blocks.min(axis=1), blocks.max(axis=1)
    d = (hi - lo) / 15
    inv = np.where(d != 0, 1 / np.where(d != 0, d, 1), 0)
    q = np.clip(np.floor((blocks - lo[:, None]) * inv[:, None] + 0.5), 0, 15).astype(np.uint8)
    packed = q[:, :16] | (q[:, 16:] << 4)
    head = np.stack([d.astype("<f2"), lo.astype("<f2")], axis=1).view(np.uint8).reshape(-1, 4)
    return np.concatenate([head, packed], axis=1).tobytes()


def q4_0(w: np.ndarray) -> bytes:
    """llama.cpp's quantize_row_q4_0: per 32 weights an fp16 scale, codes 0..15 standing for -8..7."""
    blocks = w.astype(np.float32).reshape(-1, 32)
    signed = np.take_along_axis(blocks, np.abs(blocks).argmax(1)[:, None], 1)[:, 0]
    d = signed / -8
    inv = np.where(d != 0, 1 / np.where(d != 0, d, 1), 0)
    q = np.clip(np.floor(blocks * inv[:, None] + 8.5), 0, 15).astype(np.uint8)
    packed = q[:, :16] | (q[:, 16:] << 4)
    return np.concatenate([d.astype("<f2").view(np.uint8).reshape(-1, 2), packed], axis=1).tobytes()


def q8_0(w: np.ndarray) -> bytes:
    blocks = w.astype(np.float32).reshape(-1, 32)
    d = np.abs(blocks).max(axis=1) / 127
    inv = np.where(d != 0, 1 / np.where(d != 0, d, 1), 0)
    q = np.round(blocks * inv[:, None]).astype(np.int8)
    return np.concatenate([d.astype("<f2").view(np.uint8).reshape(-1, 2), q.view(np.uint8)], axis=1).tobytes()


def _permute(w: np.ndarray, heads: int) -> np.ndarray:
    return w.reshape(heads, 2, w.shape[0] // heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def tensors(seed: int = 0) -> dict[str, tuple[np.ndarray, str]]:
    """name -> (float weights in the checkpoint's layout, GGUF type) of a tiny Llama."""
    c, rng = CONFIG, np.random.default_rng(seed)
    vocab, h, hd = len(vocabulary()), c["hidden"], c["hidden"] // c["heads"]

    def w(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape) * 0.08).astype(np.float32)

    out: dict[str, tuple[np.ndarray, str]] = {"token_embd.weight": (w(vocab, h), "Q8_0"),
                                              "output_norm.weight": (1 + w(h), "F32")}
    for i in range(c["layers"]):
        out.update({f"blk.{i}.attn_norm.weight": (1 + w(h), "F32"), f"blk.{i}.ffn_norm.weight": (1 + w(h), "F32"),
                    f"blk.{i}.attn_q.weight": (w(h, h), "Q4_1"), f"blk.{i}.attn_k.weight": (w(c["kv_heads"] * hd, h), "Q4_1"),
                    f"blk.{i}.attn_v.weight": (w(c["kv_heads"] * hd, h), "Q4_1"),
                    f"blk.{i}.attn_output.weight": (w(h, h), "Q4_1"),
                    f"blk.{i}.ffn_gate.weight": (w(c["ffn"], h), "Q4_1"), f"blk.{i}.ffn_up.weight": (w(c["ffn"], h), "Q4_1"),
                    f"blk.{i}.ffn_down.weight": (w(h, c["ffn"]), "Q4_0")})
    return out


def metadata(**changes: Any) -> dict[str, Any]:
    c = CONFIG
    tokens = vocabulary()
    md: dict[str, Any] = {
        "general.architecture": "llama", "general.name": "tiny test llama",
        "llama.block_count": c["layers"], "llama.context_length": c["context"], "llama.embedding_length": c["hidden"],
        "llama.feed_forward_length": c["ffn"], "llama.attention.head_count": c["heads"],
        "llama.attention.head_count_kv": c["kv_heads"], "llama.rope.freq_base": 10000.0,
        "llama.attention.layer_norm_rms_epsilon": 1e-5, "llama.vocab_size": len(tokens),
        "llama.rope.dimension_count": c["hidden"] // c["heads"],
        "tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": "smollm", "tokenizer.ggml.tokens": tokens,
        "tokenizer.ggml.token_type": [3] * len(SPECIALS) + [1] * (len(tokens) - len(SPECIALS)),
        "tokenizer.ggml.merges": MERGES, "tokenizer.ggml.bos_token_id": 1, "tokenizer.ggml.eos_token_id": 2,
        "tokenizer.ggml.padding_token_id": 2, "tokenizer.ggml.add_bos_token": False,
        "tokenizer.chat_template": TEMPLATE,
    }
    md.update(changes)
    return {k: v for k, v in md.items() if v is not None}


def write_gguf(path: Path, seed: int = 0, md: dict[str, Any] | None = None,
               types: dict[str, str] | None = None) -> Path:
    """A tiny Llama as a GGUF v3 file (alignment 32); `types` overrides a tensor's GGUF type id by name."""
    c = CONFIG
    md = metadata() if md is None else md
    type_ids = {"F32": 0, "F16": 1, "Q4_0": 2, "Q4_1": 3, "Q8_0": 8}
    infos, blobs, offset = [], [], 0
    for name, (w, kind) in tensors(seed).items():
        if name.endswith("attn_q.weight"):
            w = _permute(w, c["heads"])
        elif name.endswith("attn_k.weight"):
            w = _permute(w, c["kv_heads"])
        data = {"F32": lambda x: x.astype("<f4").tobytes(), "Q4_0": q4_0, "Q4_1": q4_1, "Q8_0": q8_0}[kind](w)
        dims = list(reversed(w.shape))
        kind_id = type_ids[kind] if types is None or name not in types else int(types[name])
        infos.append(_string(name) + struct.pack("<I", len(dims)) + struct.pack(f"<{len(dims)}Q", *dims)
                     + struct.pack("<IQ", kind_id, offset))
        padded = data + b"\0" * (-len(data) % 32)
        blobs.append(padded)
        offset += len(padded)
    head = b"GGUF" + struct.pack("<IQQ", 3, len(infos), len(md))
    head += b"".join(_string(k) + _value(v) for k, v in md.items()) + b"".join(infos)
    head += b"\0" * (-len(head) % 32)
    path.write_bytes(head + b"".join(blobs))
    return path
