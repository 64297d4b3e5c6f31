"""Text generation from Hugging Face decoder directories: deployc's KV-cache decoder computes what
transformers computes (Llama, Qwen2, Qwen3, Gemma, Mistral, llama3 rotary scaling, tied and biased
weights), the manifest fields a directory implies, the located errors, and a built program that
generates the same tokens as transformers' own greedy `generate`, from a bundle with the directory's
tokenizer. Tiny seeded models saved with save_pretrained at test time; nothing is downloaded."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from helpers.decoders import ARCHS, BASE, WORDS, decoder_project, save_decoder
from helpers.projects import REPO, Built, build_json, make_project, run_subprocess

from deployc.load.project import load_project
from deployc.plan.planner import make_plan
from deployc.plan.toolchain import detect


@pytest.mark.parametrize("arch", list(ARCHS))
def test_the_kv_cache_decoder_computes_what_transformers_computes(tmp_path: Path, arch: str) -> None:
    import torch

    from deployc.graph.decoder import load_decoder

    reference = save_decoder(tmp_path / arch, arch)
    ids = torch.randint(0, BASE["vocab_size"], (1, 10), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        want = reference(ids).logits[0]  # every position's next-token logits
        prefill = load_decoder(tmp_path / arch, 64)(ids, torch.arange(10))
        stepped = load_decoder(tmp_path / arch, 64)
        stepped(ids[:, :6], torch.arange(6))
        decoded = [stepped(ids[:, i:i + 1], torch.tensor([i]))[0] for i in range(6, 10)]
        every = load_decoder(tmp_path / arch, 64).every_position(ids, torch.arange(10))[0]  # held-out references
    assert torch.allclose(prefill[0], want[-1], atol=1e-4)
    assert every.shape == want.shape and torch.allclose(every, want, atol=1e-4)
    for i, got in zip(range(6, 10), decoded):
        assert torch.allclose(got, want[i], atol=1e-4), f"decode step at position {i}"


def test_real_checkpoint_layouts_load(tmp_path: Path) -> None:
    """bf16 weights (how checkpoints ship), several shards with an index, and a bare-model checkpoint."""
    import torch

    from deployc.core.errors import BuildError
    from deployc.graph.decoder import load_decoder

    reference = save_decoder(tmp_path / "fp32", "qwen2")
    reference.to(torch.bfloat16).save_pretrained(tmp_path / "bf16", max_shard_size="20KB")
    assert len(list((tmp_path / "bf16").glob("*.safetensors"))) > 1
    assert (tmp_path / "bf16" / "model.safetensors.index.json").is_file()
    ids = torch.arange(3, 11).reshape(1, 8)
    with torch.no_grad():
        want = reference.to(torch.bfloat16).float()(ids).logits[0, -1]  # the bf16 weights, computed in fp32
        got = load_decoder(tmp_path / "bf16", 32)(ids, torch.arange(8))[0]
    assert got.dtype == torch.float32 and torch.allclose(got, want, atol=1e-4)
    reference.model.save_pretrained(tmp_path / "bare")  # no `model.` prefix; qwen2 here ties its head
    with torch.no_grad():
        assert torch.allclose(load_decoder(tmp_path / "bare", 32)(ids, torch.arange(8))[0], want, atol=1e-4)
    llama = save_decoder(tmp_path / "llama-fp32", "llama")
    llama.model.save_pretrained(tmp_path / "headless")  # an untied head that was not saved
    with pytest.raises(BuildError, match=r"do not fit a llama decoder: missing lm_head\.weight"):
        load_decoder(tmp_path / "headless", 32)


def test_a_decoder_directory_implies_a_generation_program(tmp_path: Path, cli) -> None:
    manifest = decoder_project(tmp_path, "  llm:\n    task: text-generation\n    source: {huggingface: hf/llama}\n")
    (tmp_path / "project" / "hf" / "llama" / "generation_config.json").write_text(
        json.dumps({"bos_token_id": 1, "eos_token_id": [2, 9]}))
    spec = load_project(manifest).manifest.models["llm"]
    assert list(spec.inputs) == ["tokens", "input_pos"] and spec.inputs["input_pos"].fill == "arange"
    assert (spec.dims["seq"].min, spec.dims["seq"].max) == (1, 64)  # max_position_embeddings
    assert spec.constants == {"vocab_size": 120, "max_seq_len": 64, "bos_id": 1, "eos_ids": [2, 9]}
    unit = make_plan(load_project(manifest), detect()).units()[0]
    assert unit.load.context == 64 and unit.verify.generate == 32 and unit.verify.min_tokens == 0
    assert "generation_config.json" in [s.path for s in unit.load.sources]
    r = cli("plan", str(manifest))
    assert r.code == 0, r.err
    assert ("llm: constants, dims, inputs, outputs from hf/llama/config.json (task text-generation): tokens "
            "int64[1, seq], input_pos int64[seq]; KV cache of 64 positions, bos 1, eos [2, 9]") in r.out


def test_a_smaller_context_follows_the_declared_dims(tmp_path: Path) -> None:
    manifest = decoder_project(tmp_path, "  llm:\n    task: text-generation\n    source: {huggingface: hf/llama}\n"
                                  "    dims: {seq: {min: 1, max: 24}}\n")
    spec = load_project(manifest).manifest.models["llm"]
    assert spec.constants["max_seq_len"] == 24
    assert make_plan(load_project(manifest), detect()).units()[0].load.context == 24
    manifest.write_text(manifest.read_text().replace("    dims: {seq: {min: 1, max: 24}}\n",
                                                     "    constants: {max_seq_len: 16}\n"))
    spec = load_project(manifest).manifest.models["llm"]
    assert spec.dims["seq"].max == 16 and spec.constants["max_seq_len"] == 16


@pytest.mark.parametrize("model_text,message", [
    ("    dims: {seq: {min: 1, max: 32}}\n    constants: {max_seq_len: 16}\n",
     "m.yaml:9:17: error: models.llm.dims.seq: max 32 is beyond the KV cache of constants.max_seq_len 16 positions"),
    ("    dims: {seq: {min: 1, max: 16}}\n    overrides:\n      arduino_q: {dims: {seq: {min: 1, max: 40}}}\n",
     "m.yaml:11:31: error: models.llm.overrides.arduino_q.dims.seq: max 40 is beyond the KV cache of "
     "constants.max_seq_len 16"),
])
def test_a_context_beyond_the_cache_is_a_located_error(tmp_path: Path, model_text: str, message: str, cli) -> None:
    manifest = decoder_project(tmp_path, "  llm:\n    task: text-generation\n    source: {huggingface: hf/llama}\n"
                        + model_text)
    r = cli("validate", str(manifest))
    assert r.code == 2 and message in r.err, r.err


def test_token_parity_is_for_generation_models(tmp_path: Path, cli) -> None:
    manifest = decoder_project(tmp_path, "  mlp:\n    source: {factory: 'models.small:mlp'}\n"
                                  "    inputs: {x: {shape: [1, 16]}}\n    verify: {tokens: 4}\n")
    r = cli("validate", str(manifest))
    assert r.code == 2
    assert "m.yaml:9:22: error: models.mlp.verify.tokens: token parity applies to text-generation models" in r.err


def test_an_architecture_the_decoder_lacks_is_named(tmp_path: Path, cli) -> None:
    import torch
    import transformers as T

    manifest = decoder_project(tmp_path, "  llm:\n    task: text-generation\n    source: {huggingface: hf/gpt2}\n")
    torch.manual_seed(0)
    T.GPT2LMHeadModel(T.GPT2Config(vocab_size=50, n_embd=16, n_layer=1, n_head=2, n_positions=32)).save_pretrained(
        tmp_path / "project" / "hf" / "gpt2")
    r = cli("validate", str(manifest))
    assert r.code == 2 and "Traceback" not in r.err
    assert "m.yaml:8:27: error: models.llm.source.huggingface: text generation from a directory supports" in r.err
    assert "model_type 'gpt2' is not one of them" in r.err


GENERATION = """\
apiVersion: deployc/v1
name: gen
version: 0.1.0
targets: [arduino_q]
models:
  llm:
    task: text-generation
    source: {huggingface: hf/llama}
    dims: {seq: {min: 1, max: 48}}
    quantization: fp32
    verify: {tokens: 8}
  llm_8da4w:
    task: text-generation
    source: {huggingface: hf/llama}
    dims: {seq: {min: 1, max: 48}}
    quantization: 8da4w
    verify: {enabled: true, min_cosine: 0.5, min_sqnr_db: 0.0}
  llm_gguf:
    task: text-generation
    source: {huggingface: hf/llama}
    dims: {seq: {min: 1, max: 48}}
    quantization: gguf
    verify: {enabled: true, min_cosine: 0.5, min_sqnr_db: 0.0}
pipeline:
  inputs: {query: {type: text}}
  outputs: {answer: answer.text}
  tokenizers:
    words: {huggingface: hf/llama}
  stages:
    - {name: answer, op: generate, model: llm, tokenizer: words, prompt: query, max_new_tokens: 12}
"""


@pytest.fixture(scope="module")
def gen(tmp_path_factory: pytest.TempPathFactory) -> Built:
    folder = tmp_path_factory.mktemp("gen")
    manifest = make_project(folder / "project", GENERATION, "gen.yaml")
    save_decoder(folder / "project" / "hf" / "llama", "llama")
    out, cache = folder / "dist", folder / "cache"
    result, report = build_json(manifest, out, cache, "--jobs", "2")
    assert result.code == 0, result.err[-3000:]
    return Built(folder / "project", manifest, out, cache, report, result)


@pytest.mark.slow
def test_the_program_generates_what_transformers_generates(gen: Built) -> None:
    import torch
    import transformers as T

    sys.path.insert(0, str(REPO / "manifests"))
    from deployc.pipeline.host.generation import generate
    from deployc.runtime.pipeline_runner import Bundle

    u = next(u for u in gen.report["units"] if u["model"] == "llm")
    assert u["verification"]["status"] == "passed"
    assert u["verification"]["tokens"] == {"prompts": 8, "generated": 32, "matched": 32, "identical": 8}
    text = u["verification"]["text"]  # fp32: the program's next-token distributions are eager's
    assert text["positions"] == 4 * 48 and text["kl"] < 1e-6 and text["top1"] == 1.0
    assert abs(text["perplexity"] / text["reference_perplexity"] - 1) < 1e-5
    assert u["verification"]["metrics"]["min_cosine"] > 0.99999
    bundle = Bundle(gen.out / "gen" / "0.1.0" / "arduino_q")
    reference = T.AutoModelForCausalLM.from_pretrained(str(gen.folder / "hf" / "llama"), local_files_only=True).eval()
    prompt = [1, 4, 5, 6, 7, 8, 9]
    with torch.no_grad():  # transformers' own greedy decoding, with its own cache
        want = reference.generate(torch.tensor([prompt]), max_new_tokens=16, do_sample=False, min_new_tokens=16,
                                  eos_token_id=None, pad_token_id=0)[0, len(prompt):].tolist()
    got = generate(lambda t, p: bundle.call("llm", [t, p])[0], prompt, 16, 48)
    assert len(want) == 16 and got == want
    # What the decode step leaves to portable kernels: the caches written in place, no copy of them, the mask
    # made once.
    config = json.loads((gen.out / "gen" / "0.1.0" / "arduino_q" / "runtime.json").read_text())
    forward = next(m for p in config["programs"] if p["name"] == "llm" for m in p["methods"] if m["name"] == "forward")
    assert "aten::index_put_" in forward["operators"]
    assert not {"aten::index_put.out", "aten::copy_", "aten::expand_copy.out", "aten::masked_fill.Scalar_out",
                "aten::bitwise_not.out", "aten::bmm.out"} & set(forward["operators"])


@pytest.mark.slow
def test_a_quantized_decoder_reports_its_token_parity(gen: Built) -> None:
    u = next(u for u in gen.report["units"] if u["model"] == "llm_8da4w")
    tokens = u["verification"]["tokens"]
    assert tokens["generated"] == 32 and 0 <= tokens["matched"] <= 32  # measured and reported, not required
    assert u["verification"]["tolerance"]["tokens"] == 0
    text, tolerance = u["verification"]["text"], u["verification"]["tolerance"]
    assert text["positions"] == 4 * 48 and text["kl"] > 0 and 0 <= text["top1"] <= 1
    assert (tolerance["max_perplexity_ratio"], tolerance["max_kl"], tolerance["min_top1"]) == (1.10, 0.08, 0.80)


@pytest.mark.slow
def test_a_float_checkpoint_in_the_gguf_scheme_is_rounded_as_llama_cpp_rounds(gen: Built) -> None:
    """The gguf scheme on a float Hugging Face checkpoint: llama.cpp's Q4_1 blocks (graph/gguf_blocks.py),
    the activations' residual kept; judged against eager fp32 like any scheme, closer than 8da4w."""
    units = {u["model"]: u for u in gen.report["units"]}
    u, w4 = units["llm_gguf"], units["llm_8da4w"]
    assert u["status"] == "built" and u["quantization"] == "gguf"
    text = u["verification"]["text"]
    assert text["positions"] == 4 * 48 and 0 < text["kl"] < w4["verification"]["text"]["kl"]


@pytest.mark.slow
def test_deployc_run_generates_with_the_directorys_tokenizer(gen: Built, tmp_path: Path) -> None:
    bundle = gen.out / "gen" / "0.1.0" / "arduino_q"
    config = json.loads((bundle / "runtime.json").read_text())
    generate_stage = next(s for s in config["pipeline"]["stages"] if s["op"] == "generate")
    llm = next(p for p in config["programs"] if p["name"] == "llm")
    v = llm["verification"]  # what an app reads: token parity with eager, and what was required
    assert (v["tokens_generated"], v["tokens_matched"], v["tolerance_tokens"], v["tokens_prompts"]) == (32, 32, 8, 8)
    assert v["text_positions"] == 192 and v["top1"] == 1.0 and v["tolerance_max_perplexity_ratio"] == 1.001
    params = json.loads(generate_stage["params_json"])
    assert (params["bos_id"], params["eos_ids"], params["max_seq_len"]) == (1, [2], 48)  # from config.json
    r = run_subprocess("run", str(bundle), "--input", "query=how do bees find flowers ?", "--json", cwd=tmp_path,
                       env={"DEPLOYC_CACHE_DIR": str(tmp_path / "cache")})
    assert r.code == 0, r.err[-2000:]
    answer = json.loads(r.out)["outputs"]["answer"]
    assert isinstance(answer, str) and answer.split()  # words of the tokenizer's vocabulary
    assert set(answer.split()) <= set(WORDS) | {f"w{i}" for i in range(len(WORDS), BASE["vocab_size"])}
