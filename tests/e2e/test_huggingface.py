"""Models from Hugging Face directories: tiny seeded models saved with save_pretrained at test time
(nothing is downloaded), their inputs derived from config.json, built and verified through the real
path; the located errors for directories deployc cannot load; safetensors checkpoints."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from helpers.hf_models import save_tiny_models
from helpers.projects import REPO, Built, build_json, make_project

from deployc.core.errors import UserError
from deployc.load.project import load_project
from deployc.plan.planner import make_plan
from deployc.plan.toolchain import detect

HF_SUITE = """\
apiVersion: deployc/v1
name: hf
version: 0.1.0
targets: [arduino_q]
models:
  bert:
    task: embedding
    source: {huggingface: hf/bert}
    quantization: 8da8w
  distilbert:
    task: text-classification
    source: {huggingface: hf/distilbert}
  vit:
    task: image-classification
    source: {huggingface: hf/vit}
  wav:
    task: audio-embedding
    source: {huggingface: hf/wav2vec2}
  bert_w8a8:
    task: embedding
    source: {huggingface: hf/bert}
    quantization: w8a8
  vit_w8a8:
    task: image-classification
    source: {huggingface: hf/vit}
    quantization: w8a8
pipeline:
  inputs: {query: {type: text}}
  outputs: {embedding: embed.embedding}
  tokenizers:
    words: {huggingface: hf/bert}
  stages:
    - {name: tokens, op: tokenize, tokenizer: words, input: query, max_length: 64}
    - name: embed
      op: model
      model: bert
      inputs: {input_ids: tokens.input_ids, attention_mask: tokens.attention_mask}
"""


@pytest.fixture(scope="session")
def hf(tmp_path_factory: pytest.TempPathFactory) -> Built:
    folder = tmp_path_factory.mktemp("hf")
    manifest = make_project(folder / "project", HF_SUITE, "hf.yaml")
    save_tiny_models(folder / "project" / "hf")
    out, cache = folder / "dist", folder / "cache"
    result, report = build_json(manifest, out, cache, "--jobs", "2")
    assert result.code == 0, result.err[-3000:]
    return Built(folder / "project", manifest, out, cache, report, result)


@pytest.mark.slow
@pytest.mark.parametrize("model,cosine", [("bert", 0.999), ("distilbert", 0.999), ("vit", 0.999), ("wav", 0.999),
                                          ("bert_w8a8", 0.999), ("vit_w8a8", 0.997)])  # the worst of 3 inputs
def test_directories_build_and_verify_against_eager(hf: Built, model: str, cosine: float) -> None:
    u = next(u for u in hf.report["units"] if u["model"] == model)
    assert u["status"] == "built" and u["verification"]["status"] == "passed"
    assert u["verification"]["metrics"]["min_cosine"] > cosine


@pytest.mark.slow
def test_static_int8_quantizes_the_float_paths_of_a_transformer(hf: Built) -> None:
    """w8a8 on BERT: token and position ids stay integer (their adds keep integer scalars), every
    linear layer is int8, and the report says which weighted layers stayed float (none here)."""
    u = next(u for u in hf.report["units"] if u["model"] == "bert_w8a8")
    assert u["quantization"] == "w8a8" and u["stayed_float"] == []
    assert u["verification"]["metrics"]["min_sqnr_db"] > 35 and "XnnpackBackend" in u["delegates"]
    assert u["float_fallback"]["left_float"] == []  # its simulated int8 meets the tolerance with room
    # A ViT's residual stream stays float on XNNPACK (one int8 scale for it measured 15 dB, the default
    # tolerance is 20 dB), and its classifier takes its int8 input's scale at run time (a static one clipped
    # the logits): its simulated int8 meets the tolerance with room, so the float fallback leaves nothing
    # float (with static logits it left a few layers float).
    vit = next(u for u in hf.report["units"] if u["model"] == "vit_w8a8")
    fallback = vit["float_fallback"]
    assert fallback["left_float"] == [] and vit["stayed_float"] == [], vit
    assert fallback["int8_sqnr_db"] >= 20 + 3, fallback
    assert vit["verification"]["metrics"]["min_sqnr_db"] > 20


@pytest.mark.slow
def test_the_bundle_carries_what_the_config_implied(hf: Built) -> None:
    config = json.loads((hf.out / "hf" / "0.1.0" / "arduino_q" / "runtime.json").read_text())
    programs = {p["name"]: p["methods"][0] for p in config["programs"]}
    assert [(t["name"], t["dtype"]) for t in programs["bert"]["inputs"]] == [("input_ids", "int64"),
                                                                            ("attention_mask", "int64")]
    assert programs["bert"]["inputs"][0]["shape"][1] == {"value": -1, "symbol": "seq", "min": 2, "max": 64,
                                                         "multiple_of": 1}
    assert programs["bert"]["outputs"] == [{"name": "embedding", "dtype": "float32", "shape": [
        {"value": 1, "min": 1, "max": 1, "multiple_of": 1}, {"value": 32, "min": 32, "max": 32, "multiple_of": 1}]}]
    assert [d["value"] for d in programs["distilbert"]["outputs"][0]["shape"]] == [1, 3]  # num_labels
    assert [d["value"] for d in programs["vit"]["inputs"][0]["shape"]] == [1, 3, 32, 32]  # image_size
    assert [d["value"] for d in programs["wav"]["inputs"][0]["shape"]] == [1, 16000]
    assert {a["name"]: a["kind"] for a in config["assets"] if a["kind"] != "self_test"} == {"words": "tokenizer"}


def _tiny_project(tmp_path: Path, models_text: str) -> Path:
    manifest = make_project(tmp_path / "project", "apiVersion: deployc/v1\nname: t\nversion: 0.1.0\n"
                            "targets: [arduino_q]\nmodels:\n" + models_text, "m.yaml")
    save_tiny_models(tmp_path / "project" / "hf")
    return manifest


def test_plan_shows_derived_inputs_and_keys_the_weights(tmp_path: Path, cli) -> None:
    manifest = _tiny_project(tmp_path, "  vit:\n    task: image-classification\n    source: {huggingface: hf/vit}\n")
    r = cli("plan", str(manifest))
    assert r.code == 0, r.err
    assert ("vit: dims, inputs, outputs from hf/vit/config.json (task image-classification): "
            "pixel_values float32[1, 3, 32, 32]") in r.out
    plan = make_plan(load_project(manifest), detect())
    load = plan.units()[0].load
    assert [s.path for s in load.sources] == ["config.json", "model.safetensors"]
    assert set(load.packages) == {"transformers", "safetensors"} and load.derived == ["dims", "inputs", "outputs"]
    before = plan.units()[0].program_key
    weights = tmp_path / "project" / "hf" / "vit" / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 1
    weights.write_bytes(bytes(data))
    assert make_plan(load_project(manifest), detect()).units()[0].program_key != before


@pytest.mark.parametrize("break_it,message", [
    (lambda d: shutil.rmtree(d), "models.vit.source.huggingface: no directory"),
    (lambda d: (d / "config.json").unlink(), "has no config.json (is it a Hugging Face model directory?)"),
    (lambda d: (d / "config.json").write_text(json.dumps({**json.loads((d / "config.json").read_text()),
                                                          "auto_map": {"AutoModel": "x.Y"}})),
     "names custom model code (auto_map); deployc never runs code from a model directory"),
    (lambda d: (d / "config.json").write_text(json.dumps({**json.loads((d / "config.json").read_text()),
                                                          "model_type": "vitt"})),
     "model_type 'vitt' is not an architecture the installed transformers knows"),
    (lambda d: (d / "model.safetensors").rename(d / "pytorch_model.bin"),
     "has weights only as pytorch_model.bin (pickle); deployc loads safetensors"),
])
def test_a_directory_deployc_cannot_load_is_a_located_error(tmp_path: Path, break_it, message: str) -> None:
    manifest = _tiny_project(tmp_path, "  vit:\n    task: image-classification\n    source: {huggingface: hf/vit}\n")
    break_it(tmp_path / "project" / "hf" / "vit")
    with pytest.raises(UserError) as info:
        load_project(manifest)
    d = info.value.diagnostics[0]
    assert message in d.message and d.message.startswith("models.vit.source.huggingface: ")
    assert (d.location.line, d.location.col) == (8, 27)  # the value of source.huggingface


@pytest.mark.parametrize("model_text,message", [
    ("  vit:\n    source: {huggingface: hf/vit}\n",
     "models.vit.task: a Hugging Face source needs a task, one of embedding, text-classification"),
    ("  vit:\n    task: image-classification\n    source: {huggingface: hf/vit, trust_remote_code: true}\n",
     "models.vit.source.trust_remote_code: refused: deployc never runs code from a model directory"),
    ("  vit:\n    task: image-classification\n    source: {huggingface: hf/vit, factory: 'models.small:mlp'}\n",
     "models.vit.source: give one of `factory`, `huggingface` or `gguf`"),
    ("  vit:\n    task: image-classification\n    source: {huggingface: hf/vit}\n    inputs: {image: {shape: [1, 3, 32, 32]}}\n",
     "models.vit.inputs: a Hugging Face image-classification model takes pixel_values (in this order); got image"),
    ("  bert:\n    task: text-generation\n    source: {huggingface: hf/bert}\n",
     "models.bert.source.huggingface: text generation from a directory supports the decoder architectures "
     "llama, mistral, qwen2, qwen3, gemma (SmolLM and TinyLlama are llama); model_type 'bert' is not one of them"),
    ("  mlp:\n    source: {factory: 'models.small:mlp'}\n",
     "models.mlp.inputs: required (only a Hugging Face or GGUF source can derive them)"),
])
def test_manifest_mistakes_about_directories(tmp_path: Path, model_text: str, message: str, cli) -> None:
    manifest = _tiny_project(tmp_path, model_text)
    r = cli("validate", str(manifest))
    assert r.code == 2 and "Traceback" not in r.err
    assert message in r.err


@pytest.mark.slow
def test_a_safetensors_checkpoint_loads_over_a_factory_model(tmp_path: Path) -> None:
    import sys

    import torch
    from safetensors.torch import save_file

    from deployc.core.digests import file_sha256

    sys.path.insert(0, str(REPO / "manifests"))
    from models.small import mlp

    torch.manual_seed(123)
    weights = tmp_path / "w.safetensors"
    save_file({k: v.contiguous() for k, v in mlp(8, 16, 2).state_dict().items()}, str(weights))
    manifest = make_project(tmp_path / "project", "apiVersion: deployc/v1\nname: ck\nversion: 0.1.0\n"
                            "targets: [arduino_q]\nmodels:\n  net:\n    source: {factory: 'models.small:mlp', "
                            "kwargs: {features: 8, hidden: 16, classes: 2}, checkpoint: {path: w.safetensors, "
                            f"sha256: '{file_sha256(weights)}'}}}}\n    inputs: {{x: {{shape: [1, 8]}}}}\n", "ck.yaml")
    shutil.copyfile(weights, manifest.parent / "w.safetensors")
    result, report = build_json(manifest, tmp_path / "dist", tmp_path / "cache")
    assert result.code == 0, result.err[-2000:]
    assert report["units"][0]["verification"]["status"] == "passed"
    # The weights really were loaded: a checkpoint of other values gives another program.
    torch.manual_seed(7)
    save_file({k: v.contiguous() for k, v in mlp(8, 16, 2).state_dict().items()}, str(manifest.parent / "w.safetensors"))
    result, report = build_json(manifest, tmp_path / "dist2", tmp_path / "cache")
    assert result.code == 2 and report == {}
    assert ": error: models.net.source.checkpoint.sha256: w.safetensors has sha256 " in result.err


@pytest.mark.parametrize("config,logits", [
    ({"model_type": "detr", "num_queries": 7, "num_labels": 3}, [1, 7, 4]),  # softmax: + the "no object" class
    ({"model_type": "yolos", "num_detection_tokens": 5, "id2label": {"0": "a", "1": "b"}, "image_size": [32, 32]},
     [1, 5, 3]),
    ({"model_type": "rt_detr", "num_queries": 300, "num_labels": 80}, [1, 300, 80]),  # sigmoid: the labels alone
])
def test_a_detector_directory_implies_scores_and_boxes_per_query(tmp_path: Path, config: dict, logits: list) -> None:
    from deployc.load.hf_directory import HfModel, derive

    implied = derive(HfModel(tmp_path, config, ()), "object-detection")
    size = 32 if "image_size" in config else 224
    assert implied["inputs"]["pixel_values"]["shape"] == [1, 3, size, size]
    assert implied["outputs"] == {"logits": {"shape": logits}, "boxes": {"shape": [1, logits[1], 4]}}


def test_a_detector_without_queries_is_refused_with_the_reason(tmp_path: Path) -> None:
    from deployc.load.hf_directory import HfModel, HfProblem, derive

    with pytest.raises(HfProblem, match="num_queries"):
        derive(HfModel(tmp_path, {"model_type": "detr"}, ()), "object-detection")


@pytest.mark.parametrize("model_type", ["roberta", "mpnet", "esm"])
def test_models_whose_positions_start_after_the_padding_index_get_two_fewer_tokens(tmp_path: Path,
                                                                                   model_type: str) -> None:
    """Measured: MPNet and ESM index their 66-position table out of range at 65 tokens, like RoBERTa."""
    from deployc.load.hf_directory import HfModel, derive

    config = {"model_type": model_type, "vocab_size": 40, "hidden_size": 16, "max_position_embeddings": 66}
    assert derive(HfModel(tmp_path, config, ()), "embedding")["dims"]["seq"] == {"min": 2, "max": 64}


@pytest.mark.parametrize("config,depth", [
    ({"model_type": "dpt", "image_size": 384, "patch_size": 16}, 384),
    ({"model_type": "dpt", "image_size": 32, "patch_size": 8}, 64),  # measured: transformers' DPT gives 64 x 64
    ({"model_type": "depth_anything", "image_size": 32, "backbone_config": {"patch_size": 8}}, 32),
])
def test_a_depth_model_implies_its_output_resolution(tmp_path: Path, config: dict, depth: int) -> None:
    from deployc.load.hf_directory import HfModel, derive

    assert derive(HfModel(tmp_path, config, ()), "depth-estimation")["outputs"] == {"depth": {"shape": [1, depth, depth]}}


@pytest.mark.parametrize("config,model,whole", [
    ("T5Config", "T5Model", False),  # an encoder-decoder: the decoder needs decoder ids, so the encoder alone
    ("FunnelConfig", "FunnelModel", True),  # its `decoder` upsamples the encoder's output back to every token
])
def test_an_embedding_directory_runs_an_encoder_decoder_s_encoder_alone(tmp_path: Path, config: str, model: str,
                                                                         whole: bool) -> None:
    import torch
    import transformers

    from deployc.graph.hf_model import load_directory

    torch.manual_seed(0)
    sizes = ({"d_model": 32, "d_kv": 8, "d_ff": 64, "num_layers": 1, "num_heads": 4} if config == "T5Config" else
             {"d_model": 32, "n_head": 4, "d_head": 8, "d_inner": 64, "block_sizes": [1, 1]})
    getattr(transformers, model)(getattr(transformers, config)(vocab_size=200, **sizes)).save_pretrained(tmp_path)
    loaded = load_directory(tmp_path, "embedding")
    assert (type(loaded.model).__name__ == model) is whole
    ids = torch.randint(0, 200, (1, 9))
    mask = torch.ones_like(ids)
    with torch.no_grad():
        hidden = loaded.model(input_ids=ids, attention_mask=mask).last_hidden_state
        assert hidden.shape == (1, 9, 32)
        assert torch.allclose(loaded(ids, mask), torch.nn.functional.normalize(hidden.mean(1), dim=1), atol=1e-6)


def test_a_decoder_loaded_for_one_pass_builds_no_key_value_cache(tmp_path: Path) -> None:
    """Falcon as an embedding model: with its config's use_cache, each layer concatenated its keys and
    values to an empty past, and that concatenation crashed the HTP's int8 graph compile."""
    import torch
    import transformers

    from deployc.graph.hf_model import load_directory

    torch.manual_seed(0)
    config = transformers.FalconConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=4, vocab_size=200)
    assert config.use_cache
    transformers.FalconModel(config).save_pretrained(tmp_path)
    loaded = load_directory(tmp_path, "embedding")
    assert loaded.model.config.use_cache is False
    ids = torch.randint(0, 200, (1, 9))
    mask = torch.ones_like(ids)
    graph = torch.export.export(loaded, (ids, mask), strict=False).graph
    assert not any(str(n.target) == "aten.cat.default" and any(
        0 in a.meta["val"].shape for a in n.args[0]) for n in graph.nodes if n.op == "call_function")
    with torch.no_grad():
        cached = loaded.model(input_ids=ids, attention_mask=mask, use_cache=True).last_hidden_state
        hidden = loaded.model(input_ids=ids, attention_mask=mask).last_hidden_state
    assert torch.equal(cached, hidden)
