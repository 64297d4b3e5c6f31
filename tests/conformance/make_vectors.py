"""Writes the conformance vectors in this folder: per op, inputs, parameters and the outputs the op must
give, which both runtimes are tested against (tests/pipeline/test_conformance.py): deployc's Python ops and the
native runner's op table (`deployc-runner --op VECTOR.json`).

The expected outputs come from references independent of deployc's own code: numpy closed forms
(similarity, vector_search), Python's str.replace on one placeholder at a time (template), the
`tokenizers` library itself (tokenize), transformers' CLIP image processor and Whisper feature
extractor (image, audio). Deterministic: running it again writes the same bytes.

    .venv/bin/python tests/conformance/make_vectors.py
"""

from __future__ import annotations

import io
import json
import struct
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent


def tensor(a: Any, dtype: str) -> dict[str, Any]:
    a = np.asarray(a)
    return {"dtype": dtype, "shape": list(a.shape), "data": a.reshape(-1).tolist()}


def write(op: str, name: str, description: str, params: dict[str, Any], inputs: dict[str, Any],
          expected: dict[str, Any], atol: float = 0.0) -> None:
    folder = HERE / op
    folder.mkdir(exist_ok=True)
    vector = {"op": op, "description": description, "params": params, "inputs": inputs, "expected": expected,
              "atol": atol}
    (folder / f"{name}.vector.json").write_text(json.dumps(vector, indent=1, sort_keys=True) + "\n")


def similarity() -> None:
    rng = np.random.default_rng(11)
    a = rng.normal(size=(1, 6)).astype(np.float32)
    b = rng.normal(size=(5, 6)).astype(np.float32)
    b[3] = b[1]  # a tie: the first of equal rows comes first
    q, rows = a.astype(np.float64).reshape(-1), b.astype(np.float64)
    for metric, top_k in (("cosine", 3), ("dot", 5)):
        scores = rows @ q
        if metric == "cosine":
            scores = scores / (np.linalg.norm(rows, axis=1) * np.linalg.norm(q) + 1e-12)
        top = sorted(range(len(scores)), key=lambda i: (-scores[i], i))[:top_k]
        write("similarity", metric, f"{metric} of one embedding against 5 rows, a tie between rows 1 and 3",
              {"metric": metric, "top_k": top_k}, {"a": tensor(a, "float32"), "b": tensor(b, "float32")},
              {"scores": tensor(scores.astype(np.float32), "float32"), "top": tensor(np.array(top), "int64")},
              atol=1e-6)


def template() -> None:
    tpl = 'Context:\n{context}\n\nQuestion: {question}\nJSON stays: {"a": 1} {{x}} {not_given} {question}'
    chunks = [{"id": 3, "source": "corpus/a.md", "text": "First {question} passage.", "score": 0.9},
              {"id": 7, "source": "corpus/b.md", "text": "Second passage.", "score": 0.5}]
    question = "Why {context}?"
    values = {"context": "\n\n".join(c["text"] for c in chunks), "question": question}
    # One placeholder occurrence at a time, left to right, the inserted text never scanned again.
    out, i = "", 0
    while i < len(tpl):
        j = tpl.find("}", i)
        name = tpl[i + 1:j] if tpl[i] == "{" and j > i + 1 else ""
        if name.isidentifier() and name in values:
            out, i = out + values[name], j + 1
        else:
            out, i = out + tpl[i], i + 1
    write("template", "placeholders", "chunks and text filled in one pass: inserted braces stay, other braces stay",
          {"template": tpl}, {"context": {"chunks": chunks}, "question": question}, {"text": out})


def _wordpiece() -> Any:
    from tokenizers import Tokenizer, normalizers, pre_tokenizers, processors
    from tokenizers.models import WordPiece

    words = ["the", "bee", "bees", "find", "flower", "flowers", "how", "do", "##s", "##ing", "dance", "hive",
             "caf", "##e", "cafe", "?", ".", ","]
    vocab = {t: i for i, t in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]", *words])}
    tk = Tokenizer(WordPiece(vocab, unk_token="[UNK]", max_input_chars_per_word=100))
    tk.normalizer = normalizers.BertNormalizer(lowercase=True, strip_accents=None, clean_text=True,
                                               handle_chinese_chars=True)
    tk.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tk.post_processor = processors.TemplateProcessing(single="[CLS] $A [SEP]", special_tokens=[("[CLS]", 2),
                                                                                               ("[SEP]", 3)])
    return tk


def tokenize() -> None:
    folder = HERE / "tokenize"
    folder.mkdir(exist_ok=True)
    tk = _wordpiece()
    tk.save(str(folder / "wordpiece.json"))
    cases = [("plain", "How do bees find flowers?", 128, 0),
             ("truncated", "How do the bees find the flowers, dancing in the hive?", 8, 0),
             ("padded", "Bees dance.", 16, 12),
             ("accents_unknown", "Café BEES zzz", 32, 0)]
    for name, text, max_length, pad_to in cases:
        tk.enable_truncation(max_length)
        ids = tk.encode(text).ids
        mask = [1] * len(ids)
        if pad_to:
            ids, mask = ids[:pad_to] + [0] * (pad_to - len(ids)), mask[:pad_to] + [0] * (pad_to - len(mask))
        params: dict[str, Any] = {"tokenizer": "wordpiece.json", "max_length": max_length}
        if pad_to:
            params["pad_to"] = pad_to
        write("tokenize", name, f"WordPiece, max_length {max_length}" + (f", padded to {pad_to}" if pad_to else ""),
              params, {"input": text}, {"input_ids": tensor([ids], "int64"), "attention_mask": tensor([mask], "int64")})


def vector_search() -> None:
    folder = HERE / "vector_search"
    folder.mkdir(exist_ok=True)
    rng = np.random.default_rng(5)
    vectors = rng.normal(size=(6, 4)).astype("<f4")
    vectors[4] = vectors[2]  # a tie: the first of equal rows comes first
    chunks = [{"id": i, "source": f"corpus/{i}.md", "text": f"passage {i}"} for i in range(6)]
    (folder / "index.f32").write_bytes(vectors.tobytes())
    meta = {"schema_version": 1, "name": "docs", "model": "embedder", "count": 6, "dim": 4, "metric": "cosine",
            "vectors": "index.f32", "chunks": chunks}
    (folder / "index.json").write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")
    query = (vectors[2] + 0.1 * rng.normal(size=4)).astype(np.float32)
    v64, q64 = vectors.astype(np.float64), query.astype(np.float64)
    scores = (v64 @ q64) / (np.linalg.norm(v64, axis=1) * np.linalg.norm(q64) + 1e-12)
    top = sorted(range(6), key=lambda i: (-scores[i], i))[:3]
    found = [{**chunks[i], "score": float(scores[i])} for i in top]
    write("vector_search", "top3", "cosine top 3 of 6 vectors; rows 2 and 4 are equal",
          {"index": "index.json", "top_k": 3}, {"query": tensor(query[None], "float32")},
          {"chunks": {"chunks": found}, "text": "\n\n".join(c["text"] for c in found),
           "scores": tensor(np.array([scores[i] for i in top], dtype=np.float32), "float32")}, atol=1e-5)


def image() -> None:
    from PIL import Image
    from transformers import CLIPImageProcessorPil

    folder = HERE / "image"
    folder.mkdir(exist_ok=True)
    rng = np.random.default_rng(2)
    photos = {"rgb_13x9.png": rng.integers(0, 256, (9, 13, 3), dtype=np.uint8),
              "gray_7x11.png": rng.integers(0, 256, (11, 7), dtype=np.uint8)}
    mean, std = [0.48145466, 0.4578275, 0.40821073], [0.26862954, 0.26130258, 0.27577711]
    steps = [{"op": "decode"}, {"op": "resize", "shortest_edge": 8, "filter": "bicubic"},
             {"op": "center_crop", "height": 6, "width": 6}, {"op": "rescale", "factor": 1 / 255},
             {"op": "normalize", "mean": mean, "std": std}, {"op": "layout", "layout": "NCHW"}]
    processor = CLIPImageProcessorPil(size={"shortest_edge": 8}, crop_size={"height": 6, "width": 6},
                                      image_mean=mean, image_std=std)
    for file, pixels in photos.items():
        buf = io.BytesIO()
        Image.fromarray(pixels).save(buf, "PNG")
        (folder / file).write_bytes(buf.getvalue())
        with Image.open(io.BytesIO(buf.getvalue())) as im:
            want = processor(im.convert("RGB"), return_tensors="np")["pixel_values"].astype(np.float32)
        write("image", file.split(".")[0], f"{file}: CLIP's steps at a tiny size (shortest edge 8, crop 6)",
              {"steps": steps}, {"input": {"file": file}}, {"pixels": tensor(want, "float32")}, atol=1e-5)


def _wav16(samples: np.ndarray, rate: int) -> bytes:
    body = np.round(np.clip(samples, -1, 1) * 32767).astype("<i2").tobytes()
    fmt = struct.pack("<HHIIHH", 1, 1, rate, rate * 2, 2, 16)
    return (b"RIFF" + struct.pack("<I", 4 + 8 + len(fmt) + 8 + len(body)) + b"WAVE" + b"fmt " +
            struct.pack("<I", len(fmt)) + fmt + b"data" + struct.pack("<I", len(body)) + body)


def audio() -> None:
    from transformers import WhisperFeatureExtractor

    folder = HERE / "audio"
    folder.mkdir(exist_ok=True)
    rate, samples = 16000, 4000
    t = np.arange(3000) / rate
    tone = 0.4 * np.sin(2 * np.pi * 440 * t) + 0.1 * np.random.default_rng(4).normal(size=t.size)
    data = _wav16(tone, rate)
    (folder / "tone_16k.wav").write_bytes(data)
    decoded = np.frombuffer(data[44:], dtype="<i2").astype(np.float64) / 32768.0
    extractor = WhisperFeatureExtractor(feature_size=8, sampling_rate=rate, hop_length=40, chunk_length=1,
                                        n_fft=64)
    extractor.n_samples = samples  # a quarter-second window instead of chunk_length's whole seconds
    extractor.nb_max_frames = samples // 40
    want = extractor(decoded, sampling_rate=rate, return_tensors="np")["input_features"].astype(np.float32)
    steps = [{"op": "decode_wav"}, {"op": "resample", "sample_rate": rate}, {"op": "pad_or_trim", "samples": samples},
             {"op": "log_mel", "sample_rate": rate, "n_fft": 64, "hop_length": 40, "n_mels": 8, "fmin": 0.0,
              "fmax": rate / 2}]
    write("audio", "tone_16k", "16-bit WAV at 16 kHz, padded to 0.25 s, 8 Whisper log-mel bins",
          {"steps": steps}, {"input": {"file": "tone_16k.wav"}}, {"features": tensor(want, "float32")}, atol=1e-4)


if __name__ == "__main__":
    for make in (similarity, template, tokenize, vector_search, image, audio):
        make()
