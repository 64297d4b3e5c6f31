"""A decoder's held-out text: tokenized into the plan (its ids decide the program key), the default
sample when the manifest names none, the model's tokenizer found, and every bad input a located error."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers.decoders import decoder_project

from deployc.load.project import load_project
from deployc.plan import heldout
from deployc.plan.planner import make_plan
from deployc.plan.toolchain import detect

LLM = "  llm:\n    task: text-generation\n    source: {huggingface: hf/llama}\n    dims: {seq: {min: 1, max: 48}}\n"


def _unit(manifest: Path):  # type: ignore[no-untyped-def]
    return make_plan(load_project(manifest), detect()).units()[0]


def test_the_default_sample_is_tokenized_into_the_plan(tmp_path: Path) -> None:
    unit = _unit(decoder_project(tmp_path, LLM))
    text = unit.export.text
    assert text is not None and text.file == heldout.SAMPLE_NAME and text.tokenizer == "hf/llama/tokenizer.json"
    # 4 windows of 48 positions (the context), each fed from bos; 8 prompts of 16 tokens, 32 generated.
    assert [len(w) for w in text.windows] == [49] * 4 and all(w[0] == 1 for w in text.windows)
    assert [len(p) for p in text.prompts] == [16] * 8 and unit.verify.generate == 32
    assert (unit.verify.max_perplexity_ratio, unit.verify.max_kl, unit.verify.min_top1) == (1.001, 0.001, 0.99)


def test_the_named_text_decides_the_program_key(tmp_path: Path) -> None:
    manifest = decoder_project(tmp_path, LLM + "    verify: {text: held.txt, max_kl: 0.5}\n")
    held = manifest.parent / "held.txt"
    held.write_text("how do bees find flowers ? they smell them . " * 40)
    first = _unit(manifest)
    assert first.export.text is not None and first.export.text.file == "held.txt" and first.verify.max_kl == 0.5
    assert first.export.text.windows[0][1:6] == [4, 5, 6, 7, 8]  # how do bees find flowers
    held.write_text("they smell them . how do bees find flowers ? " * 40)
    second = _unit(manifest)
    assert second.program_key != first.program_key  # measured again on the new text


def test_a_model_without_a_tokenizer_says_so(tmp_path: Path) -> None:
    manifest = decoder_project(tmp_path, LLM)
    (manifest.parent / "hf" / "llama" / "tokenizer.json").unlink()
    unit = _unit(manifest)
    assert unit.export.text is None and "no tokenizer" in unit.export.text_reason
    assert unit.verify.generate == 32 and unit.verify.max_kl is None  # seeded prompts' parity only


@pytest.mark.parametrize("content,message", [
    (b"", "models.llm.verify.text: held.txt is empty"),
    (b"   \n\n", "models.llm.verify.text: held.txt is empty"),
    (b"caf\xe9 au lait", "models.llm.verify.text: held.txt is not UTF-8 (byte 3: invalid continuation byte)"),
    (None, "models.llm.verify.text: held.txt is not a file next to the manifest"),
])
def test_an_unusable_held_out_file_is_located(tmp_path: Path, content: bytes | None, message: str, cli) -> None:
    manifest = decoder_project(tmp_path, LLM + "    verify: {text: held.txt}\n")
    if content is not None:
        (manifest.parent / "held.txt").write_bytes(content)
    r = cli("validate", str(manifest))
    assert r.code == 2 and f"m.yaml:10:20: error: {message}" in r.err, r.err


def test_a_text_shorter_than_the_windows_is_located(tmp_path: Path, cli) -> None:
    manifest = decoder_project(tmp_path, LLM + "    verify: {text: held.txt}\n")
    (manifest.parent / "held.txt").write_text("how do bees find flowers ? " * 20)  # 120 tokens
    assert cli("validate", str(manifest)).code == 0  # its length in tokens is the plan's to check
    r = cli("plan", str(manifest))
    assert r.code == 2 and "Traceback" not in r.err
    assert ("m.yaml:10:20: error: models.llm.verify.text: held.txt gives 120 tokens with hf/llama/tokenizer.json; "
            "verifying a decoder takes at least 193 (4 windows of 48 and the next token)") in r.err, r.err


def test_a_tokenizer_that_is_not_the_models_is_located(tmp_path: Path, cli) -> None:
    manifest = decoder_project(tmp_path, LLM)
    tokenizer = manifest.parent / "hf" / "llama" / "tokenizer.json"
    doc = json.loads(tokenizer.read_text())
    doc["model"]["vocab"]["extra"] = 500  # ids beyond config.json's vocab_size 120
    tokenizer.write_text(json.dumps(doc))
    r = cli("validate", str(manifest))
    assert r.code == 2 and ("m.yaml:8:27: error: models.llm.source.huggingface: hf/llama/tokenizer.json gives 501 "
                            "token ids but config.json's vocab_size is 120: the tokenizer is not this model's") in r.err, r.err


def test_held_out_fields_are_for_decoders(tmp_path: Path, cli) -> None:
    manifest = decoder_project(tmp_path, "  mlp:\n    source: {factory: 'models.small:mlp'}\n"
                                  "    inputs: {x: {shape: [1, 16]}}\n    verify: {text: held.txt, max_kl: 0.1}\n")
    r = cli("validate", str(manifest))
    assert r.code == 2
    assert "models.mlp.verify.text: held-out text checks apply to text-generation models; models.mlp has task other" in r.err
    assert "models.mlp.verify.max_kl: held-out text checks apply to text-generation models" in r.err
