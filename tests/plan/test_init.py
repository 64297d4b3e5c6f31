"""`deployc init`: a starter manifest from a Hugging Face directory that validates, plans and builds as
written; the task read from config.json; a scheme each target accepts; never an overwritten file."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml
from helpers.hf_models import save_tiny_models
from helpers.projects import build_json


@pytest.fixture(scope="session")
def dirs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("init-models")
    save_tiny_models(folder)
    return folder


def _copied(dirs: Path, name: str, project: Path) -> str:
    """A saved model directory copied into the project (a manifest builds from what its folder holds)."""
    shutil.copytree(dirs / name, project / name)
    return name


def _fake_dir(folder: Path, config: dict) -> Path:
    """A directory whose config.json says what we need; init plans, it never loads the weights."""
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps(config))
    (folder / "model.safetensors").write_bytes(b"\0" * 16)
    return folder


@pytest.mark.full  # builds a starter manifest's programs
@pytest.mark.slow
def test_the_starter_manifest_builds_as_written(project: Path, dirs: Path, cli) -> None:
    shutil.copytree(dirs / "bert", project / "my-bert")
    r = cli("init", "my-bert", "--target", "arduino_q")
    assert r.code == 0, r.err
    manifest = project / "my_bert.yaml"
    assert "wrote my_bert.yaml (embedding; arduino_q: 8da8w)" in r.out
    data = yaml.safe_load(manifest.read_text())
    model = data["models"]["my_bert"]
    assert model["task"] == "embedding" and model["source"] == {"huggingface": "my-bert"}
    assert model["dims"] == {"seq": {"min": 2, "max": 64}} and model["quantization"] == "8da8w"
    assert list(model["inputs"]) == ["input_ids", "attention_mask"]
    assert data["pipeline"]["tokenizers"] == {"tokenizer": {"huggingface": "my-bert"}}
    assert data["pipeline"]["outputs"] == {"embedding": "embed.embedding"}
    assert "# A starter manifest for my-bert" in manifest.read_text()
    result, report = build_json(manifest, project / "dist", project / "cache")
    assert result.code == 0, result.err[-3000:]
    [unit] = report["units"]
    assert unit["status"] == "built" and unit["verification"]["status"] == "passed"
    assert (project / "dist" / "my-bert" / "0.1.0" / "arduino_q" / "runtime.json").is_file()


@pytest.mark.parametrize("model,task", [("distilbert", "text-classification"), ("vit", "image-classification"),
                                        ("wav2vec2", "audio-embedding")])
def test_the_task_comes_from_the_architecture(project: Path, dirs: Path, cli, model: str, task: str) -> None:
    r = cli("init", _copied(dirs, model, project), "--out", "m.yaml")
    assert r.code == 0, r.err
    data = yaml.safe_load((project / "m.yaml").read_text())
    assert data["models"][model]["task"] == task
    # Every profile on the search path that can build it: LiteRT's converter takes static shapes only, so
    # android_litert builds the image and audio models (fixed sizes) but not the text model (dynamic seq).
    static = task != "text-classification"
    assert data["targets"] == (["android_litert"] if static else []) + ["arduino_q", "snapdragon"]
    assert "pipeline" not in data  # no tokenizer.json in these directories
    assert ("has no tokenizer.json" in (project / "m.yaml").read_text()) == (task == "text-classification")
    assert cli("validate", "m.yaml").code == 0


def test_a_target_that_does_not_take_the_scheme_gets_an_override(project: Path, dirs: Path, cli) -> None:
    (project / "targets" / "gpu_box.yaml").write_text(
        "apiVersion: deployc/v1\nname: gpu_box\ndevice: {name: Box, soc: X1, os: linux, abi: arm64-v8a}\nunits:\n  - {name: gpu, backend: vulkan, quantization: [fp16]}\n")
    r = cli("init", _copied(dirs, "vit", project), "--target", "arduino_q", "--target", "gpu_box")
    assert r.code == 0, r.err
    assert "arduino_q: 8da8w, gpu_box: fp16" in r.out
    model = yaml.safe_load((project / "vit.yaml").read_text())["models"]["vit"]
    assert model["quantization"] == "8da8w" and model["overrides"] == {"gpu_box": {"quantization": "fp16"}}
    plan = cli("plan", "vit.yaml", "--json")
    assert plan.code == 0, plan.err
    units = {(u["target"], u["unit"], u["quantization"]) for b in json.loads(plan.out)["plan"]["targets"]
             for u in b["units"]}
    assert units == {("arduino_q", "cpu", "8da8w"), ("gpu_box", "gpu", "fp16")}


def test_convolutional_models_get_static_int8(project: Path, cli) -> None:
    _fake_dir(project / "resnet", {"model_type": "resnet", "architectures": ["ResNetForImageClassification"],
                                   "num_channels": 3, "hidden_sizes": [16, 32], "id2label": {"0": "a", "1": "b"}})
    r = cli("init", "resnet", "--target", "arduino_q")
    assert r.code == 0, r.err
    model = yaml.safe_load((project / "resnet.yaml").read_text())["models"]["resnet"]
    assert model["quantization"] == "w8a8" and model["task"] == "image-classification"
    assert model["inputs"]["pixel_values"]["shape"] == [1, 3, 224, 224]


def test_an_existing_manifest_is_never_overwritten(project: Path, dirs: Path, cli) -> None:
    (project / "bert.yaml").write_text("mine\n")
    r = cli("init", _copied(dirs, "bert", project))
    assert r.code == 2 and "bert.yaml exists; deployc init never overwrites a manifest" in r.err
    assert (project / "bert.yaml").read_text() == "mine\n"
    assert [p.name for p in project.iterdir() if p.name.startswith(".deployc-init")] == []


@pytest.mark.parametrize("args,config,expected", [
    (["--task", "bogus"], None, "--task bogus: not a task; one of embedding, text-classification"),
    ([], {"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "vocab_size": 100},
     "gpt2/config.json: error: text generation from a directory supports the decoder architectures llama"),
    ([], {"model_type": "bert", "vocab_size": 100, "architectures": ["BertForNextSentencePrediction"]},
     "config.json has architectures ['BertForNextSentencePrediction'], which does not say the task; pass --task"),
    (["--target", "nowhere"], None, "unknown target profile 'nowhere'"),
])
def test_what_init_cannot_do_is_said(project: Path, dirs: Path, cli, args: list[str], config: dict | None,
                                     expected: str) -> None:
    folder = project / _copied(dirs, "bert", project) if config is None else _fake_dir(project / config["model_type"], config)
    r = cli("init", str(folder.relative_to(project)), *args)
    assert r.code == 2 and expected in r.err, r.err
    assert sorted(p.name for p in project.glob("*.yaml")) == []


def test_a_decoder_gets_a_generation_manifest(project: Path, cli) -> None:
    from helpers.decoders import save_decoder

    save_decoder(project / "tiny-llama", "llama")
    r = cli("init", "tiny-llama", "--target", "arduino_q")
    assert r.code == 0, r.err
    assert "wrote tiny_llama.yaml (text-generation; arduino_q: 8da4w)" in r.out
    data = yaml.safe_load((project / "tiny_llama.yaml").read_text())
    model = data["models"]["tiny_llama"]
    assert list(model["inputs"]) == ["tokens", "input_pos"] and model["dims"] == {"seq": {"min": 1, "max": 64}}
    assert model["constants"] == {"vocab_size": 120, "max_seq_len": 64, "bos_id": 1, "eos_ids": [2]}
    assert data["pipeline"]["stages"] == [{"name": "answer", "op": "generate", "model": "tiny_llama",
                                           "tokenizer": "tokenizer", "prompt": "prompt", "max_new_tokens": 32}]
    assert cli("plan", "tiny_llama.yaml").code == 0


def test_a_folder_that_is_not_a_model_is_named(project: Path, cli) -> None:
    (project / "empty").mkdir()
    r = cli("init", "empty")
    assert r.code == 2 and "empty: error: empty has no config.json (is it a Hugging Face model directory?)" in r.err


def test_a_model_directory_outside_the_manifests_folder_is_refused(project: Path, dirs: Path, cli) -> None:
    """A manifest builds from what its folder holds; init says where to write it instead (and writes nothing)."""
    r = cli("init", str(dirs / "bert"), "--out", "m.yaml")
    assert r.code == 2
    assert r.err.splitlines() == [
        f"error: {dirs / 'bert'} is not inside {project}, where the manifest goes: a manifest builds from what its "
        "folder holds",
        f"    hint: write it beside the directory: --out {dirs}/m.yaml, or move the directory into {project}"]
    assert sorted(p.name for p in project.iterdir()) == ["models", "targets"]
