"""`weights: external`: a program's weights in a .ptd beside its .pte (ExecuTorch named data), stored once
per bundle when programs share them, loaded by the verifier, deployc run and the native runner; a missing
.ptd is a clear error, never the raw runtime's crash."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from helpers.projects import build_json, make_project, run_subprocess

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


@pytest.mark.full  # a second data-file build
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


TIED_MODEL = '''
import torch
from torch import nn


class Tied(nn.Module):
    """A token embedding whose table is also the output layer's weight (tie_word_embeddings)."""

    def __init__(self, vocab: int = 4000, dim: int = 64, tie: bool = True) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.mix = nn.Linear(dim, dim)
        self.out = nn.Linear(dim, vocab, bias=False)
        if tie:
            self.out.weight = self.embed.weight

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.out(torch.tanh(self.mix(self.embed(tokens))))[:, -1]


def build(tie: bool = True) -> nn.Module:
    return Tied(tie=tie).eval()
'''

TIED = """\
apiVersion: deployc/v1
name: tied
version: 1.0.0
targets: [arduino_q]
models:
""" + "".join(f"""  {name}:
    source: {{factory: "models.tied:build", kwargs: {{tie: {str(tie).lower()}}}}}
    inputs: {{tokens: {{shape: [1, 8], dtype: int64, range: [0, 3999]}}}}
    weights: {weights}
    quantization: {quant}
""" for name, tie, weights, quant in [
    ("tied_in", True, "embedded", "fp32"), ("tied_ext", True, "external", "fp32"),
    ("untied_ext", False, "external", "fp32"),
    ("tied_8da4w", True, "external", "8da4w"), ("untied_8da4w", False, "external", "8da4w"),
    ("tied_8da8w", True, "external", "8da8w"), ("untied_8da8w", False, "external", "8da8w")])


@pytest.mark.full  # a second data-file build
def test_tied_input_output_weights_are_stored_once_outside_the_program(tmp_path: Path, runner: Path) -> None:
    """weights: external: a tied 4000x64 table is stored once in the .ptd, in fp32 (1,024,000 B), int8
    and int4; inside a .pte it is stored twice (the embedding's constant and XNNPACK's copy for the
    output layer)."""
    manifest = make_project(tmp_path / "project", TIED, "tied.yaml")
    (manifest.parent / "models" / "tied.py").write_text(TIED_MODEL)
    result, report = build_json(manifest, tmp_path / "dist", tmp_path / "cache")
    assert result.code == 0, result.err[-3000:]
    assert {u["verification"]["status"] for u in report["units"]} == {"passed"}
    b = tmp_path / "dist" / "tied" / "1.0.0" / "arduino_q"
    table = 4000 * 64 * 4
    tied, untied, inside = ((b / "tied_ext.ptd").stat().st_size, (b / "untied_ext.ptd").stat().st_size,
                            (b / "tied_in.pte").stat().st_size)
    assert table < tied < 1.05 * table and 2 * table < untied < 2.05 * table and inside > 2 * table
    # Quantized, the table is stored once too: int4 in groups of 32 (128,000 B; the embedding kernel's
    # fp32 group scales and XNNPACK's bf16 ones are not shared: 48,000 B), int8 per row (256,000 B).
    # Every XNNPACK weight is in the data file: each .pte keeps only its graph.
    sizes = {name: ((b / f"{name}.pte").stat().st_size, (b / f"{name}.ptd").stat().st_size)
             for name in ("tied_8da4w", "untied_8da4w", "tied_8da8w", "untied_8da8w")}
    int4, int8 = 4000 * 64 // 2, 4000 * 64
    assert int4 < sizes["tied_8da4w"][1] - 48_000 < 1.1 * int4, sizes
    assert 2 * int4 < sizes["untied_8da4w"][1] - 48_000 < 2.2 * int4, sizes
    assert int8 < sizes["tied_8da8w"][1] < 1.15 * int8, sizes
    assert 2 * int8 < sizes["untied_8da8w"][1] < 2.2 * int8, sizes
    assert all(pte < 20_000 for pte, _ in sizes.values()), sizes
    native = subprocess.run([str(runner), str(b), "--self-test"], capture_output=True, text=True, timeout=300)
    assert native.returncode == 0, native.stderr[-2000:]  # the pair-swapped embedding runs natively too
    assert [r["status"] for r in json.loads(native.stdout)["programs"]] == ["passed"] * 7
