"""`weights: external`: a program's weights in a .ptd beside its .pte (ExecuTorch named data), stored once
per bundle when programs share them, loaded by the verifier, deployc run and the native runner; a missing
.ptd is a clear error, never the raw runtime's crash."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import build_json, make_project, run_subprocess

pytestmark = pytest.mark.slow

MANIFEST = """\
apiVersion: deployc/v1
name: ext
version: 1.0.0
targets: [arduino_q]
models:
  enc_any:
    source: {factory: "models.small:text_encoder", kwargs: {vocab: 500, dim: 64}}
    inputs:
      tokens: {shape: [1, seq], dtype: int64, range: [0, 499]}
    dims:
      seq: {min: 4, max: 32}
    quantization: 8da8w
    weights: external
  enc_short:   # the same weights, for short inputs: one .ptd serves both
    source: {factory: "models.small:text_encoder", kwargs: {vocab: 500, dim: 64}}
    inputs:
      tokens: {shape: [1, seq], dtype: int64, range: [0, 499]}
    dims:
      seq: {min: 2, max: 8}
    quantization: 8da8w
    weights: external
  mlp:
    source: {factory: "models.small:mlp", kwargs: {features: 16, hidden: 32, classes: 4}}
    inputs:
      x: {shape: [batch, 16]}
    dims:
      batch: {min: 1, max: 4}
    weights: external
"""


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("external")
    manifest = make_project(folder / "project", MANIFEST, "ext.yaml")
    result, report = build_json(manifest, folder / "dist", folder / "cache")
    assert result.code == 0, result.err[-3000:]
    assert {u["verification"]["status"] for u in report["units"]} == {"passed"}  # verified with their .ptd
    return folder / "dist" / "ext" / "1.0.0" / "arduino_q"


def test_shared_weights_are_stored_once(bundle: Path) -> None:
    config = json.loads((bundle / "runtime.json").read_text())
    programs = {p["name"]: p for p in config["programs"]}
    assert programs["enc_any"]["data_file"] == programs["enc_short"]["data_file"] == "enc_any.ptd"
    assert programs["enc_any"]["data_sha256"] == programs["enc_short"]["data_sha256"]
    assert programs["mlp"]["data_file"] == "mlp.ptd"
    assert sorted(p.name for p in bundle.glob("*.ptd")) == ["enc_any.ptd", "mlp.ptd"]
    lock = json.loads((bundle / "bundle.lock.json").read_text())
    assert {"enc_any.ptd", "mlp.ptd"} <= set(lock["files"])
    # fp32 weights leave the .pte entirely; the .ptd holds them
    assert (bundle / "mlp.pte").stat().st_size < 4096 < (bundle / "mlp.ptd").stat().st_size
    assert programs["enc_any"]["data_bytes"] == (bundle / "enc_any.ptd").stat().st_size


def test_programs_run_with_their_data_on_the_host_and_natively(bundle: Path, runner: Path) -> None:
    host = run_subprocess("inspect", str(bundle), "--self-test", "--json")
    assert host.code == 0, host.err[-2000:]
    assert {r["status"] for r in json.loads(host.out)["self_test"]} == {"passed"}
    proc = subprocess.run([str(runner), str(bundle), "--self-test"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert {r["status"] for r in json.loads(proc.stdout)["programs"]} == {"passed"}


def test_a_missing_data_file_is_a_clear_error(bundle: Path, runner: Path, tmp_path: Path) -> None:
    copy = tmp_path / "bundle"
    shutil.copytree(bundle, copy)
    (copy / "enc_any.ptd").unlink()
    proc = subprocess.run([str(runner), str(copy), "--self-test"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2 and "error: enc_any.ptd: missing from the bundle" in proc.stderr
    r = run_subprocess("inspect", str(copy), "--self-test")
    assert r.code == 1 and "enc_any.ptd" in r.out + r.err and "Traceback" not in r.err


def test_backends_that_keep_weights_inside_refuse_it(tmp_path: Path) -> None:
    pinned = "  mlp:\n    overrides:\n      arduino_q: {unit: mcu, quantization: w8a8, dims: {batch: {min: 1, max: 1}}}\n"
    manifest = make_project(tmp_path / "p", MANIFEST.replace("  mlp:\n", pinned), "ext.yaml")
    r = run_subprocess("plan", str(manifest))
    assert r.code == 2
    assert ("unit 'mcu' (cortex_m) cannot build this model: keeps its weights inside its delegate; the model asks "
            "for weights: external") in r.err
