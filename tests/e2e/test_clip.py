"""manifests/clip_match.yaml end to end: both CLIP towers built and verified, the image index embedded by
the shipped image program, `deployc run` with an image, a text or both, the native runner giving the
same answers, and the located errors of image/audio/similarity stages. Placeholder weights: what is
tested is the plumbing (identical images give identical embeddings, index and query agree)."""

from __future__ import annotations

import io
import json
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from helpers.jvm import run_junit
from helpers.projects import REPO, build_json
from PIL import Image

from deployc.targets.native_build import JavaApi

IMAGES = REPO / "manifests" / "clip" / "images"


@pytest.fixture(scope="module")
def clip(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("clip")
    project = folder / "project"
    shutil.copytree(REPO / "manifests", project, ignore=shutil.ignore_patterns("__pycache__"))
    result, report = build_json(project / "clip_match.yaml", folder / "dist", folder / "cache")
    assert result.code == 0, result.err[-3000:]
    assert {(u["target"], u["status"]) for u in report["units"]} == {("snapdragon", "built"), ("arduino_q", "built")}
    assert all(u["verification"]["status"] == "passed" for u in report["units"])
    return folder / "dist" / "clip-match" / "1.0.0"


def _run(cli, bundle: Path, *inputs: str) -> dict:  # type: ignore[no-untyped-def]
    r = cli("run", str(bundle), *[a for i in inputs for a in ("--input", i)], "--json")
    assert r.code == 0, r.err
    return json.loads(r.out)


@pytest.mark.slow
def test_bundle_holds_the_image_index_and_declares_input_types(clip: Path) -> None:
    config = json.loads((clip / "arduino_q" / "runtime.json").read_text())
    assert dict(zip(config["pipeline"]["inputs"], config["pipeline"]["input_types"])) == {"image": "image",
                                                                                          "text": "text"}
    pixels = next(s for s in config["pipeline"]["stages"] if s["name"] == "pixels")
    steps = json.loads(pixels["params_json"])["steps"]
    assert [s["op"] for s in steps] == ["decode", "resize", "center_crop", "rescale", "normalize", "layout"]
    assert steps[1] == {"op": "resize", "shortest_edge": 224, "filter": "bicubic"}  # from preprocessor_config.json
    index = json.loads((clip / "arduino_q" / "assets" / "indexes" / "photos.json").read_text())
    assert index["count"] == 12 and index["dim"] == 64
    assert sorted(c["text"] for c in index["chunks"]) == sorted(p.name for p in IMAGES.glob("*.png"))


@pytest.mark.slow
def test_every_corpus_image_finds_itself_and_identical_images_embed_identically(cli, clip: Path,  # type: ignore[no-untyped-def]
                                                                                tmp_path: Path) -> None:
    bundle = clip / "arduino_q"
    index = json.loads((bundle / "assets" / "indexes" / "photos.json").read_text())
    vectors = np.fromfile(bundle / "assets" / "indexes" / index["vectors"], dtype="<f4").reshape(12, 64)
    for chunk in index["chunks"]:
        out = _run(cli, bundle, f"image={REPO / 'manifests' / chunk['source']}")
        best = out["outputs"]["similar_images"][0]
        assert best["source"] == chunk["source"] and best["score"] == pytest.approx(1.0, abs=1e-5)
        assert "images_for_text" not in out["outputs"] and "match" not in out["outputs"]  # no text given
    # The same pixels under another name and as a lossless copy (different file bytes): the same vector.
    copy = tmp_path / "copy.png"
    with Image.open(IMAGES / "blue_square.png") as im:
        im.save(copy, compress_level=9)
    a = _run(cli, bundle, f"image={IMAGES / 'blue_square.png'}")["outputs"]["similar_images"]
    b = _run(cli, bundle, f"image={copy}")["outputs"]["similar_images"]
    assert a == b
    row = next(i for i, c in enumerate(index["chunks"]) if c["text"] == "blue_square.png")
    assert np.linalg.norm(vectors[row]) == pytest.approx(1.0, abs=1e-5)


@pytest.mark.slow
def test_text_query_and_match_on_both_targets(cli, clip: Path) -> None:  # type: ignore[no-untyped-def]
    results = {}
    for target in ("snapdragon", "arduino_q"):
        out = _run(cli, clip / target, "text=a red circle", f"image={IMAGES / 'red_circle.png'}")
        assert len(out["outputs"]["images_for_text"]) == 3 and len(out["outputs"]["similar_images"]) == 3
        assert len(out["outputs"]["match"]) == 1 and -1.0 <= out["outputs"]["match"][0] <= 1.0
        results[target] = out["outputs"]
    assert results["snapdragon"] == results["arduino_q"]  # the same CPU program on both
    text_only = _run(cli, clip / "arduino_q", "text=a red circle")["outputs"]
    assert text_only["images_for_text"] == results["arduino_q"]["images_for_text"]
    assert set(text_only) == {"images_for_text"}


@pytest.mark.slow
def test_native_runner_gives_the_same_answers(runner: Path, cli, clip: Path) -> None:  # type: ignore[no-untyped-def]
    bundle = clip / "arduino_q"
    for image, text in [("red_circle.png", "a red circle"), ("yellow_triangle.png", "green")]:
        host = _run(cli, bundle, f"text={text}", f"image={IMAGES / image}")["outputs"]
        r = subprocess.run([str(runner), str(bundle), "--pipeline", "--text", f"text={text}", "--file",
                            f"image={IMAGES / image}"], capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        native = json.loads(r.stdout)["outputs"]
        for key in ("similar_images", "images_for_text"):
            assert [c["source"] for c in native[key]] == [c["source"] for c in host[key]]
            assert [c["score"] for c in native[key]] == pytest.approx([c["score"] for c in host[key]], abs=1e-5)
        assert native["match"]["data"] == pytest.approx(host["match"], abs=1e-5)
        # The pixel tensor itself: native preprocessing of the same file equals deployc run's.
        r = subprocess.run([str(runner), str(bundle), "--pipeline", "--file", f"image={IMAGES / image}", "--until",
                            "pixels"], capture_output=True, text=True)
        pixels = json.loads(r.stdout)["stages"]["pixels"]["pixels"]
        from deployc.pipeline.host.images import prepare_image

        config = json.loads((bundle / "runtime.json").read_text())
        steps = json.loads(next(s for s in config["pipeline"]["stages"] if s["name"] == "pixels")["params_json"])
        want = prepare_image((IMAGES / image).read_bytes(), steps["steps"])
        assert pixels["shape"] == [1, 3, 224, 224]
        assert np.abs(np.asarray(pixels["data"], dtype=np.float32) - want.reshape(-1)).max() <= 1e-5


@pytest.mark.slow
def test_the_java_api_takes_an_image_as_bytes_or_pixels(java_api: JavaApi, cli, clip: Path,  # type: ignore[no-untyped-def]
                                                        tmp_path: Path) -> None:
    bundle, image = clip / "arduino_q", IMAGES / "green_square.png"
    (tmp_path / "expected.json").write_text(json.dumps(_run(cli, bundle, f"image={image}")["outputs"]["similar_images"]))
    proc = run_junit(java_api, tmp_path, ["dev.deployc.MediaTest"], {
        "deployc.clip": str(bundle), "deployc.image": str(image), "deployc.expected": str(tmp_path / "expected.json")})
    assert proc.returncode == 0 and "OK (2 tests)" in proc.stdout, (proc.stdout + proc.stderr)[-4000:]


@pytest.mark.slow
def test_bad_images_and_inputs_exit_2_naming_the_stage(runner: Path, cli, clip: Path,  # type: ignore[no-untyped-def]
                                                       tmp_path: Path) -> None:
    bundle = clip / "arduino_q"
    broken = tmp_path / "broken.jpg"
    buf = io.BytesIO()
    Image.new("RGB", (64, 48), (200, 10, 10)).save(buf, "JPEG")
    broken.write_bytes(buf.getvalue()[:120])
    text = tmp_path / "notes.png"
    text.write_text("not an image")
    for path, message in [(broken, "stage pixels (image): cannot decode the image"),
                          (text, "stage pixels (image): not a PNG or JPEG file")]:
        r = cli("run", str(bundle), "--input", f"image={path}")
        assert r.code == 2 and message in r.err, r.err
        n = subprocess.run([str(runner), str(bundle), "--pipeline", "--file", f"image={path}"], capture_output=True,
                           text=True)
        assert n.returncode == 2 and message in n.stderr, n.stderr
    r = cli("run", str(bundle), "--input", f"image={tmp_path / 'missing.png'}")
    assert r.code == 2 and "--input image: cannot read the file" in r.err
    r = cli("run", str(bundle))
    assert r.code == 2 and "pipeline inputs are image (image), text (text); give at least one" in r.err


BASE = """\
apiVersion: deployc/v1
name: clip
version: 1.0.0
targets: [arduino_q]
models:
  vision:
    task: embedding
    source: {factory: "models.small:convnet"}
    inputs:
      image: {shape: [1, 3, 32, 32], dtype: float32}
    outputs: {embedding: {shape: [1, 10]}}
  speech:
    task: embedding
    source: {factory: "models.small:convnet"}
    inputs:
      features: {shape: [1, 80, 100], dtype: float32}
    outputs: {embedding: {shape: [1, 10]}}
pipeline:
  inputs: {photo: {type: image}, clip: {type: audio}, note: {type: text}}
  outputs: {score: match.scores, heard: hear.embedding, caption: caption.text}
  stages:
    - {name: pixels, op: image, input: photo, resize: {height: 32, width: 32}, mean: [0.5, 0.5, 0.5], std: [0.5, 0.5, 0.5]}
    - {name: see, op: model, model: vision, inputs: {image: pixels.pixels}}
    - {name: mel, op: audio, input: clip, sample_rate: 16000, n_fft: 400, hop_length: 160, n_mels: 80, seconds: 1.0}
    - {name: hear, op: model, model: speech, inputs: {features: mel.features}}
    - {name: match, op: similarity, a: see.embedding, b: hear.embedding}
    - {name: caption, op: template, template: "{n}", inputs: {n: note}}
"""

CASES = {
    "image-from-text": ([("input: photo, resize", "input: note, resize")],
                        "m.yaml:22:40: error: pipeline.stages[0].input: type mismatch: gets text, expects image"),
    "crop-zero": ([("resize: {height: 32, width: 32}", "crop: {height: 0, width: 32}")],
                  "m.yaml:22:62: error: pipeline.stages[0].crop.height: input should be greater than or equal to 1, "
                  "got 0"),
    "shape": ([("resize: {height: 32, width: 32}", "resize: {height: 30, width: 32}")],
              "m.yaml:23:61: error: pipeline.stages[1].inputs.image: shape mismatch: gets tensor float32[1, 3, 30, "
              "32], expects tensor float32[1, 3, 32, 32]"),
    "mean-length": ([("mean: [0.5, 0.5, 0.5]", "mean: [0.5, 0.5]")],
                    "m.yaml:22:86: error: pipeline.stages[0].mean: list should have at least 3 items after validation, "
                    "not 2"),
    "nyquist": ([("seconds: 1.0}", "seconds: 1.0, fmax: 9000}")],
                "m.yaml:24:124: error: pipeline.stages[2].fmax: fmax 9000 Hz is above the Nyquist frequency 8000 Hz"),
    "frames": ([("seconds: 1.0}", "seconds: 2.0}")],
               "pipeline.stages[3].inputs.features: shape mismatch: gets tensor float32[1, 80, 200], expects "
               "tensor float32[1, 80, 100]"),
    "audio-missing": ([("sample_rate: 16000, ", "")],
                      "pipeline.stages[2].sample_rate: sample_rate must be given (here or by a preprocessor config)"),
    "preprocessor-missing": ([("input: photo, resize", "input: photo, preprocessor: nope.json, resize")],
                             "pipeline.stages[0].preprocessor: file not found: nope.json"),
    "similarity-type": ([("a: see.embedding", "a: pixels.pixels")],
                        "pipeline.stages[4].a: type mismatch: gets tensor float32[1, 3, 32, 32], expects an "
                        "embedding: tensor float32[rows, dim]"),
    "unknown-op": ([("op: similarity", "op: similarty")],
                   "pipeline.stages[4].op: 'similarty' is not one of: model, tokenize, vector_search, template, "
                   "generate, image, audio, similarity"),
}


def test_base_manifest_is_valid(cli, project: Path) -> None:  # type: ignore[no-untyped-def]
    (project / "m.yaml").write_text(BASE)
    r = cli("validate", "m.yaml")
    assert r.code == 0, r.err


@pytest.mark.parametrize("case", sorted(CASES))
def test_located_errors(cli, project: Path, case: str) -> None:  # type: ignore[no-untyped-def]
    edits, expected = CASES[case]
    text = BASE
    for old, new in edits:
        assert old in text
        text = text.replace(old, new, 1)
    (project / "m.yaml").write_text(text)
    r = cli("validate", "m.yaml")
    assert r.code == 2 and "Traceback" not in r.err
    assert expected in r.err, r.err


AUDIO_MODEL = '''
import torch
from torch import nn


class Listener(nn.Module):
    """Log-mel frames -> a unit embedding: a 1-D convolution over time, mean-pooled."""

    def __init__(self, mels: int = 80, dim: int = 16) -> None:
        super().__init__()
        self.conv = nn.Conv1d(mels, dim, 5, padding=2)

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        return nn.functional.normalize(torch.relu(self.conv(features)).mean(dim=2), dim=-1)


def build() -> nn.Module:
    return Listener().eval()
'''

AUDIO_MANIFEST = """\
apiVersion: deployc/v1
name: listen
version: 1.0.0
targets: [arduino_q]
models:
  listener:
    task: embedding
    source: {factory: "models.listener:build"}
    inputs:
      features: {shape: [1, 80, 100], dtype: float32, range: [-1.5, 1.5]}
    outputs: {embedding: {shape: [1, 16]}}
pipeline:
  inputs: {clip: {type: audio}, other: {type: audio}}
  outputs: {features: mel.features, same: match.scores}
  stages:
    - {name: mel, op: audio, input: clip, sample_rate: 16000, n_fft: 400, hop_length: 160, n_mels: 80, seconds: 1.0}
    - {name: heard, op: model, model: listener, inputs: {features: mel.features}}
    - {name: mel2, op: audio, input: other, sample_rate: 16000, n_fft: 400, hop_length: 160, n_mels: 80, seconds: 1.0}
    - {name: heard2, op: model, model: listener, inputs: {features: mel2.features}}
    - {name: match, op: similarity, a: heard.embedding, b: heard2.embedding, metric: dot}
"""


@pytest.mark.slow
def test_audio_pipeline_end_to_end(cli, project: Path, runner: Path, java_api: JavaApi) -> None:  # type: ignore[no-untyped-def]
    """A WAV file through decode, resample, log-mel and a model, in deployc run and natively."""
    from helpers.sounds import CLIPS

    (project / "models" / "listener.py").write_text(AUDIO_MODEL)
    (project / "m.yaml").write_text(AUDIO_MANIFEST)
    r = cli("build", "m.yaml", "--out", "dist", "--json")
    assert r.code == 0, r.err
    bundle = project / "dist" / "listen" / "1.0.0" / "arduino_q"
    for name in ("pcm8_8k_stereo.wav", "pcm24_22k.wav"):
        (project / name).write_bytes(CLIPS[name])
    host = _run(cli, bundle, "clip=pcm8_8k_stereo.wav", "other=pcm24_22k.wav")["outputs"]
    n = subprocess.run([str(runner), str(bundle), "--pipeline", "--file", "clip=pcm8_8k_stereo.wav", "--file",
                        "other=pcm24_22k.wav"], capture_output=True, text=True, cwd=project)
    assert n.returncode == 0, n.stderr
    native = json.loads(n.stdout)["outputs"]
    assert native["features"]["shape"] == [1, 80, 100]
    assert np.abs(np.asarray(native["features"]["data"]) - np.asarray(host["features"]).reshape(-1)).max() <= 1e-5
    assert native["same"]["data"] == pytest.approx(host["same"], abs=1e-5)
    same = _run(cli, bundle, "clip=pcm24_22k.wav", "other=pcm24_22k.wav")["outputs"]["same"]
    assert same[0] == pytest.approx(1.0, abs=1e-5)  # one clip twice: identical unit embeddings
    # The Java API: the same clip as samples (Inputs.audio(float[], rate)) and as the file's bytes.
    from deployc.pipeline.host.sounds import decode_wav

    samples, rate = decode_wav(CLIPS["pcm24_22k.wav"])
    assert rate == 22050
    (project / "samples.f32").write_bytes(samples.astype("<f4").tobytes())
    alone = _run(cli, bundle, "clip=pcm24_22k.wav", "other=pcm24_22k.wav")["outputs"]["features"]
    (project / "features.json").write_text(json.dumps(np.asarray(alone).reshape(-1).tolist()))
    proc = run_junit(java_api, project, ["dev.deployc.MediaTest"], {
        "deployc.audio": str(bundle), "deployc.wav": str(project / "pcm24_22k.wav"),
        "deployc.samples": str(project / "samples.f32"), "deployc.features": str(project / "features.json")})
    assert proc.returncode == 0 and "OK (2 tests)" in proc.stdout, (proc.stdout + proc.stderr)[-4000:]
    (project / "noise.wav").write_bytes(b"RIFF\x10\x00\x00\x00WAVEfmt \x02\x00\x00\x00")
    r = cli("run", str(bundle), "--input", "clip=noise.wav")
    assert r.code == 2 and "stage mel (audio): WAV fmt chunk is too short" in r.err, r.err
