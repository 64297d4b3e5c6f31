"""LiteRT as a second output format: manifests/small_models_litert.yaml builds .tflite programs for
android_litert (litert-torch) beside .pte programs for arduino_q, each verified against eager PyTorch
(the .tflite on the host's LiteRT interpreter); bundles know the format; clean rebuilds are
byte-identical; what LiteRT cannot take is refused, located, or falls back."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from helpers.projects import REPO, build_json

MANIFEST = "small_models_litert.yaml"


def _build(folder: Path, *extra: str) -> tuple[Path, dict]:  # type: ignore[type-arg]
    project = folder / "project"
    if not project.exists():
        shutil.copytree(REPO / "manifests", project, ignore=shutil.ignore_patterns("__pycache__", "corpus", "clip"))
    result, report = build_json(project / MANIFEST, folder / "dist", folder / "cache", *extra)
    assert result.code == 0, result.err[-3000:]
    return folder / "dist" / "small-models-litert" / "0.1.0", report


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:  # type: ignore[type-arg]
    return _build(tmp_path_factory.mktemp("litert"), "--jobs", "2")


@pytest.mark.slow
def test_both_formats_from_one_manifest(built: tuple[Path, dict]) -> None:  # type: ignore[type-arg]
    dist, report = built
    units = {(u["model"], u["target"]): u for u in report["units"]}
    assert {u["status"] for u in units.values()} == {"built"}
    assert all(u["verification"]["status"] == "passed" for u in units.values())
    assert {m: units[(m, "android_litert")]["unit"] for m in ("classifier", "vision", "encoder")} == \
        {"classifier": "cpu", "vision": "gpu", "encoder": "cpu"}  # fp32 on the GPU delegate, int8 on the CPU
    lite = json.loads((dist / "android_litert" / "runtime.json").read_text())
    et = json.loads((dist / "arduino_q" / "runtime.json").read_text())
    assert sorted(p["file"] for p in lite["programs"]) == ["classifier.tflite", "encoder.tflite", "vision.tflite"]
    assert sorted(p["file"] for p in et["programs"]) == ["classifier.pte", "encoder.pte", "vision.pte"]
    by_name = {p["name"]: p for p in lite["programs"]}
    assert {p["format"] for p in lite["programs"]} == {"tflite"} and all("format" not in p for p in et["programs"])
    encoder = by_name["encoder"]
    # int64 token ids become int32 in the .tflite: the config tells the app what to pass.
    assert [(t["name"], t["dtype"], [d["value"] for d in t["shape"]]) for t in encoder["methods"][0]["inputs"]] == \
        [("tokens", "int32", [1, 32])]
    assert "EMBEDDING_LOOKUP" in encoder["methods"][0]["operators"]
    assert {r["name"]: r["value"] for r in by_name["vision"]["requirements"]}["delegate"] == "gpu"
    assert by_name["classifier"]["verification"]["min_cosine"] >= 0.999  # dynamic-range int8
    sizes = {p["name"]: p["size_bytes"] for p in lite["programs"]}
    assert sizes["encoder"] < 200_000  # int8 weights: ~138 KB against ~416 KB in fp32 (measured)


@pytest.mark.slow
def test_diff_and_inspect_know_the_format(built: tuple[Path, dict], cli) -> None:  # type: ignore[no-untyped-def]
    dist = built[0]
    r = cli("diff", str(dist / "arduino_q"), str(dist / "android_litert"), "--json")
    changes = {p["program"]: p["changes"] for p in json.loads(r.out)["programs"]}
    assert changes["encoder"]["format"] == ["pte", "tflite"] and changes["vision"]["unit"] == ["cpu", "gpu"]
    assert {f["file"] for f in json.loads(r.out)["files"] if f["change"] == "added"} >= {"encoder.tflite"}
    r = cli("inspect", str(dist / "android_litert"))
    assert r.code == 0 and "litert (.tflite)" in r.out and "encoder.forward operators: ADD" in r.out
    assert "delegate=cpu" in r.out and "verified against bundle.lock.json: ok" in r.out


@pytest.mark.slow
def test_runs_on_the_host_interpreter_and_self_tests(built: tuple[Path, dict], cli,  # type: ignore[no-untyped-def]
                                                     runner: Path) -> None:
    import torch

    from deployc.runtime.pipeline_runner import Bundle

    bundle = built[0] / "android_litert"
    b = Bundle(bundle)
    tokens = np.random.default_rng(0).integers(0, 1000, (1, 32)).astype(np.int64)  # as the manifest declares
    (out,) = b.call("encoder", [tokens])
    import sys

    sys.path.insert(0, str(REPO / "manifests"))
    from models.small import text_encoder

    torch.manual_seed(0)
    eager = text_encoder(vocab=1000, dim=64)(torch.from_numpy(tokens)).detach().numpy()
    cos = float((out * eager).sum() / np.linalg.norm(out) / np.linalg.norm(eager))
    assert out.shape == (1, 64) and cos > 0.99
    r = cli("inspect", str(bundle), "--self-test", "--json")
    assert r.code == 0, r.err
    assert {p["program"]: p["status"] for p in json.loads(r.out)["self_test"]} == \
        {"classifier": "passed", "encoder": "passed", "vision": "passed"}
    n = subprocess.run([str(runner), str(bundle), "--self-test"], capture_output=True, text=True)
    assert n.returncode == 0
    assert {p["status"] for p in json.loads(n.stdout)["programs"]} == {"not-run"}
    assert "a LiteRT program (.tflite)" in n.stdout
    n = subprocess.run([str(runner), str(bundle), "--program", "vision", "--input", str(bundle / "x.npy")],
                       capture_output=True, text=True)
    np.save(bundle.parent / "x.npy", np.zeros((1, 3, 32, 32), np.float32))
    n = subprocess.run([str(runner), str(bundle), "--program", "vision", "--input", str(bundle.parent / "x.npy")],
                       capture_output=True, text=True)
    assert n.returncode == 2 and "vision is a LiteRT program (vision.tflite)" in n.stderr


@pytest.mark.full  # a second whole build
@pytest.mark.slow
def test_clean_rebuild_is_byte_identical(built: tuple[Path, dict], tmp_path: Path) -> None:  # type: ignore[type-arg]
    again, _ = _build(tmp_path, "--target", "android_litert")
    first = json.loads((built[0] / "android_litert" / "bundle.lock.json").read_text())["files"]
    second = json.loads((again / "android_litert" / "bundle.lock.json").read_text())["files"]
    assert first == second
    for name in ("classifier.tflite", "encoder.tflite", "vision.tflite"):
        assert (built[0] / "android_litert" / name).read_bytes() == (again / "android_litert" / name).read_bytes()


BASE = """\
apiVersion: deployc/v1
name: lite
version: 1.0.0
targets: [android_litert]
models:
  enc:
    source: {factory: "models.small:text_encoder"}
    inputs:
      tokens: {shape: [1, seq], dtype: int64, range: [0, 999]}
    dims: {seq: {min: 8, max: 8}}
    quantization: 8da8w
"""


@pytest.mark.parametrize("edit,expected", [
    (("quantization: 8da8w", "quantization: w8a8"),
     "no unit of target 'android_litert' can build model 'enc' with scheme 'w8a8'"),
    (("quantization: 8da8w", "quantization: 8da4w\n    overrides: {android_litert: {unit: cpu}}"),
     "unit 'cpu' (litert) cannot build this model: accepts fp32, fp16, 8da8w, 8w; not 8da4w"),
    (("seq: {min: 8, max: 8}", "seq: {min: 4, max: 16}"),
     "litert-torch 0.10 cannot export dynamic dims"),
])
def test_located_refusals(cli, project: Path, edit: tuple[str, str], expected: str) -> None:  # type: ignore[no-untyped-def]
    (project / "m.yaml").write_text(BASE.replace(*edit))
    r = cli("plan", "m.yaml")
    assert r.code == 2 and "Traceback" not in r.err
    assert "m.yaml:" in r.err and expected in r.err, r.err


def test_unknown_litert_option_is_a_profile_error(cli, project: Path) -> None:  # type: ignore[no-untyped-def]
    (project / "targets" / "phone.yaml").write_text(
        "apiVersion: deployc/v1\nname: phone\ndevice: {soc: X, os: android, abi: arm64-v8a}\n"
        "units:\n  - {name: npu, backend: litert, options: {delegate: npu}, quantization: [fp32]}\n")
    (project / "m.yaml").write_text(BASE.replace("[android_litert]", "[phone]").replace("8da8w", "fp32"))
    r = cli("validate", "m.yaml")
    assert r.code == 2 and "delegate 'npu' is not one of: cpu, gpu" in r.err, r.err


ODD = '''
import torch
from torch import nn


class Bessel(nn.Module):
    """torch.special.i0: an op litert-torch has no lowering for."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(16, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(torch.special.i0(x))


def build() -> nn.Module:
    return Bessel().eval()
'''


@pytest.mark.full  # a second LiteRT build
@pytest.mark.slow
def test_an_op_litert_cannot_convert_fails_the_unit_naming_it_and_falls_back(cli, project: Path) -> None:  # type: ignore[no-untyped-def]
    (project / "models" / "odd.py").write_text(ODD)
    (project / "targets" / "lite_first.yaml").write_text(
        "apiVersion: deployc/v1\nname: lite_first\ndevice: {soc: X, os: android, abi: arm64-v8a}\n"
        "units:\n  - {name: lite, backend: litert, quantization: [fp32]}\n"
        "  - {name: cpu, backend: xnnpack, quantization: [fp32]}\nfallback: next\n")
    (project / "m.yaml").write_text("apiVersion: deployc/v1\nname: odd\nversion: 1.0.0\ntargets: [lite_first]\n"
                                    "models:\n  odd:\n    source: {factory: \"models.odd:build\"}\n"
                                    "    inputs:\n      x: {shape: [2, 16], dtype: float32}\n")
    r = cli("build", "m.yaml", "--out", "dist", "--json")
    report = json.loads(r.out)
    (unit,) = report["units"]
    (tried,) = unit["fell_back_from"]
    assert (tried["unit"], tried["backend"], tried["step"]) == ("lite", "litert", "lower")
    assert "litert-torch cannot convert the model" in tried["error"] and "aten.i0" in tried["error"]
    assert unit["unit"] == "cpu"  # the next unit was tried (ExecuTorch has no i0 kernel either: it fails too)
