"""GGUF files: read as llama.cpp and transformers read them, and refused, before anything is allocated,
when damaged or hostile."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np
import pytest
from helpers.gguf_files import CONFIG, metadata, q4_1, tensors, vocabulary, write_gguf

from deployc.core import gguf, gguf_model


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_gguf(tmp_path_factory.mktemp("gguf") / "tiny.gguf")


def test_the_header_and_the_config(tiny: Path) -> None:
    f = gguf.read(tiny)
    assert f.version == 3 and f.architecture == "llama" and len(f.tensors) == 2 + 9 * CONFIG["layers"]
    c = gguf_model.hf_config(f)
    assert c["hidden_size"] == 64 and c["num_key_value_heads"] == 2 and c["head_dim"] == 16
    assert c["vocab_size"] == len(vocabulary()) and c["tie_word_embeddings"] is True
    assert (c["bos_token_id"], c["eos_token_id"]) == (1, 2)
    assert f.tensor("blk.0.ffn_down.weight").shape == (64, 128)  # numpy order: [out, in]


def test_weights_are_llama_cpps_dequantization_under_the_checkpoints_names(tiny: Path) -> None:
    f = gguf.read(tiny)
    state = gguf_model.state_dict(f)
    assert set(state) >= {"model.embed_tokens.weight", "model.layers.0.self_attn.q_proj.weight", "model.norm.weight"}
    for name, (w, kind) in tensors().items():
        mine = state[gguf_model.checkpoint_name(name)]
        assert mine.shape == w.shape
        if kind == "F32":
            assert np.array_equal(mine, w)
        elif kind == "Q4_1":  # at most half a step of 16 from the float weights; 16 levels a block
            blocks = mine.reshape(-1, 32)
            step = (w.reshape(-1, 32).max(1) - w.reshape(-1, 32).min(1)) / 15
            assert np.all(np.abs(blocks - w.reshape(-1, 32)) <= step[:, None] * 0.5 + 1e-3)
            assert max(len(np.unique(b)) for b in blocks) <= 16
    # The q rows come back in the checkpoint's order (llama.cpp's converter interleaves them per head).
    q = state["model.layers.0.self_attn.q_proj.weight"]
    expected = np.frombuffer(q4_1(tensors()["blk.0.attn_q.weight"][0]), np.uint8)
    assert q.shape == (64, 64) and expected.size == 64 * 64 // 32 * 20


def test_transformers_reads_the_same_weights_and_tokens(tiny: Path) -> None:
    import torch
    from tokenizers import Tokenizer
    from transformers import AutoModelForCausalLM, AutoTokenizer

    f = gguf.read(tiny)
    ref = AutoModelForCausalLM.from_pretrained(str(tiny.parent), gguf_file=tiny.name, dtype=torch.float32).state_dict()
    for name, w in gguf_model.state_dict(f).items():
        assert np.array_equal(ref[name].numpy(), w), name
    theirs = AutoTokenizer.from_pretrained(str(tiny.parent), gguf_file=tiny.name)
    mine = Tokenizer.from_str(gguf_model.tokenizer_json(f))
    text = "<|im_start|>user\nhello bees, find flowers?<|im_end|>"
    assert mine.encode(text).ids == theirs(text)["input_ids"]
    assert mine.encode("<|im_end|>").ids == [2]  # a control token stays whole


def test_the_view_is_a_directory_made_once(tiny: Path, tmp_path: Path) -> None:
    f = gguf.read(tiny)
    folder = gguf_model.view(f, "ab" * 32, tmp_path)
    assert folder == tmp_path / "gguf" / "ab" / f"{'ab' * 32}-v{gguf_model.VIEW_VERSION}"
    config = json.loads((folder / "tokenizer_config.json").read_text())
    assert config["eos_token"] == "<|im_end|>" and config["chat_template"].startswith("{% for message")
    stamp = (folder / "tokenizer.json").stat().st_mtime_ns
    gguf_model.view(f, "ab" * 32, tmp_path)
    assert (folder / "tokenizer.json").stat().st_mtime_ns == stamp


def _problem(path: Path) -> str:
    with pytest.raises(gguf.GgufProblem) as exc:
        gguf_model.hf_config(gguf.read(path))
    return str(exc.value)


@pytest.mark.parametrize("fraction", [0.0001, 0.01, 0.3, 0.6, 0.9, 0.999])
def test_a_cut_file_is_truncated_or_damaged(tiny: Path, tmp_path: Path, fraction: float) -> None:
    data = tiny.read_bytes()
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(data[:int(len(data) * fraction)])
    assert "truncated or damaged" in _problem(cut)


def test_not_a_gguf_file(tmp_path: Path) -> None:
    p = tmp_path / "model.gguf"
    p.write_bytes(b"PK\x03\x04" + b"\0" * 100)
    assert _problem(p) == "model.gguf: not a GGUF file (it starts with b'PK\\x03\\x04', not b'GGUF')"
    p.write_bytes(b"")
    assert "not a GGUF file" in _problem(p)


def _header(version: int, n_tensors: int, n_kv: int, rest: bytes = b"") -> bytes:
    return b"GGUF" + struct.pack("<IQQ", version, n_tensors, n_kv) + rest + b"\0" * 64


@pytest.mark.parametrize("data,said", [
    (_header(3, 2**60, 1), "it claims 1,152,921,504,606,846,976 tensors"),
    (_header(3, 0, 2**40), "1,099,511,627,776 metadata entries"),
    (_header(3, 0, 1, struct.pack("<Q", 2**50)), "metadata key 0 needs 1,125,899,906,842,624 bytes at offset 32"),
    (_header(3, 0, 1, struct.pack("<Q", 1) + b"k" + struct.pack("<IIQ", 9, 8, 2**45)),
     "k (35,184,372,088,832 elements) needs"),
    (_header(1, 0, 0), "GGUF version 1; deployc reads versions 2, 3"),
], ids=["tensors", "metadata", "string", "array", "version"])
def test_absurd_counts_and_lengths_are_refused_before_allocation(tmp_path: Path, data: bytes, said: str) -> None:
    p = tmp_path / "hostile.gguf"
    p.write_bytes(data)
    with pytest.raises(gguf.GgufProblem) as exc:
        gguf.read(p)
    assert said in str(exc.value)


def test_a_tensor_type_deployc_cannot_read_is_named(tmp_path: Path) -> None:
    p = write_gguf(tmp_path / "k.gguf", types={"blk.0.ffn_up.weight": "12"})
    assert _problem(p) == "k.gguf: tensor blk.0.ffn_up.weight is Q4_K; deployc reads F32, F16, Q4_0, Q4_1, Q8_0, " \
                          "BF16 tensors"


def test_another_architecture_and_missing_metadata_are_named(tmp_path: Path) -> None:
    other = write_gguf(tmp_path / "qwen.gguf", md=metadata(**{"general.architecture": "qwen3"}))
    assert _problem(other) == "qwen.gguf: architecture 'qwen3'; deployc builds GGUF files of llama"
    missing = write_gguf(tmp_path / "m.gguf", md=metadata(**{"llama.block_count": None}))
    assert _problem(missing) == "m.gguf: metadata llama.block_count is missing"
    wrong = write_gguf(tmp_path / "w.gguf", md=metadata(**{"llama.embedding_length": 32}))
    assert _problem(wrong) == "w.gguf: tensor token_embd.weight is [269, 64], the metadata implies [269, 32]"
    typed = write_gguf(tmp_path / "t.gguf", md=metadata(**{"llama.block_count": "two"}))
    assert _problem(typed) == "t.gguf: metadata llama.block_count is str, expected int"
