"""Quantized embedding tables: which recipes quantize them (plan, no torch), and a built text encoder whose
int4/int8 tables run on ExecuTorch's quantized embedding kernels, smaller than with float tables and
still verified against eager PyTorch."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers.projects import Built, build_json, make_project

from deployc.load.project import load_project
from deployc.plan.planner import make_plan
from deployc.plan.toolchain import detect

ENCODERS = """\
apiVersion: deployc/v1
name: emb
version: 0.1.0
targets: [arduino_q]
models:
""" + "".join(f"""\
  {name}:
    source: {{factory: "models.small:text_encoder", kwargs: {{vocab: 500, dim: 64}}}}
    inputs:
      tokens: {{shape: [1, seq], dtype: int64, range: [0, 499]}}
    dims:
      seq: {{min: 4, max: 32}}
    quantization: {quantization}
""" for name, quantization in [("int4", "8da4w"), ("int4_float_tables", "{scheme: 8da4w, embeddings: false}"),
                               ("int8", "8da8w"), ("int8_float_tables", "{scheme: 8da8w, embeddings: false}"),
                               ("fp32", "fp32")])


def test_which_recipes_quantize_embedding_tables(tmp_path: Path) -> None:
    manifest = make_project(tmp_path / "project", ENCODERS, "emb.yaml")
    units = {u.model: u for u in make_plan(load_project(manifest), detect()).units()}
    bits = {m: u.quantize.recipe.embedding_bits for m, u in units.items()}
    assert bits == {"int4": 4, "int4_float_tables": None, "int8": 8, "int8_float_tables": None, "fp32": None}
    assert units["int4"].quantize.description.endswith(
        "+ embeddings IntxWeightOnlyConfig(weight_dtype=int4, granularity=PerGroup(32))")
    assert units["int8"].quantize.description.endswith(
        "+ embeddings IntxWeightOnlyConfig(weight_dtype=int8, granularity=PerAxis(0))")
    assert "embeddings" not in units["int8_float_tables"].quantize.description
    assert units["int4"].program_key != units["int4_float_tables"].program_key


@pytest.fixture(scope="module")
def encoders(tmp_path_factory: pytest.TempPathFactory) -> Built:
    folder = tmp_path_factory.mktemp("emb")
    manifest = make_project(folder / "project", ENCODERS, "emb.yaml")
    result, report = build_json(manifest, folder / "dist", folder / "cache", "--jobs", "2")
    assert result.code == 0, result.err[-3000:]
    return Built(folder / "project", manifest, folder / "dist", folder / "cache", report, result)


# The five encoders' build (~50 s) is make test-all's: make test builds int4 tables in the suite's encoder_8da4w
# (tests/e2e/test_build.py) and plans every recipe here.
@pytest.mark.full
@pytest.mark.slow
@pytest.mark.parametrize("quantized,floated,kernel", [
    ("int4", "int4_float_tables", "quantized_decomposed::embedding_4bit.out"),
    ("int8", "int8_float_tables", "quantized_decomposed::embedding_byte.out"),
])
def test_quantized_tables_are_smaller_and_still_verified(encoders: Built, quantized: str, floated: str,
                                                         kernel: str) -> None:
    q, f = encoders.unit(quantized, "arduino_q"), encoders.unit(floated, "arduino_q")
    assert q["verification"]["status"] == "passed" and f["verification"]["status"] == "passed"
    from deployc.core.pte import method_facts, read_program

    def operators(unit: dict) -> list[str]:  # what the runtime must register, read from the .pte
        return method_facts(read_program(Path(unit["pte"]).read_bytes()))["forward"].operators

    assert kernel in operators(q) and kernel not in operators(f)
    assert "torchao::dequantize_affine" not in " ".join(operators(q))
    table = 500 * 64 * 4  # the fp32 table the quantized program no longer stores
    stored = 500 * 64 // (2 if quantized == "int4" else 1) + 500 * (64 // 32 if quantized == "int4" else 1) * 4
    assert f["size_bytes"] - q["size_bytes"] == pytest.approx(table - stored, rel=0.05)
    assert q["verification"]["metrics"]["min_cosine"] > 0.98


@pytest.mark.full
@pytest.mark.slow
def test_inspect_says_where_the_bytes_go(encoders: Built, cli) -> None:
    bundle = encoders.out / "emb" / "0.1.0" / "arduino_q"
    r = cli("inspect", str(bundle), "--json")
    assert r.code == 0, r.err
    import json

    info = json.loads(r.out)
    kinds = info["bytes_by_kind"]
    for name in ("int4", "int4_float_tables", "int8", "fp32"):
        assert sum(kinds[name].values()) == info["sizes"][f"{name}.pte"]
    assert kinds["fp32"]["quantized_weights"] == 0 and kinds["fp32"]["scales"] == 0
    # the 500 x 64 table moves from float weights to quantized weights (int4: 16,000 B) and scales
    assert kinds["int4_float_tables"]["float_weights"] - kinds["int4"]["float_weights"] == 500 * 64 * 4
    assert kinds["int4"]["quantized_weights"] - kinds["int4_float_tables"]["quantized_weights"] == 500 * 32
    assert kinds["int8"]["quantized_weights"] > kinds["int4"]["quantized_weights"]
    r = cli("inspect", str(bundle / "int4.pte"))
    assert r.code == 0 and "quantized weights" in r.out and "scales" in r.out


@pytest.mark.full
@pytest.mark.slow
def test_deployc_run_executes_the_quantized_kernels(encoders: Built, tmp_path: Path) -> None:
    import numpy as np

    from deployc.graph.host_runtime import load_program

    tokens = np.arange(10, dtype=np.int64).reshape(1, 10)
    import torch

    outputs = {}
    for name in ("int4", "int8", "fp32"):
        method = load_program(Path(encoders.unit(name, "arduino_q")["pte"])).load_method("forward")
        outputs[name] = method([torch.from_numpy(tokens)])[0].numpy().reshape(-1)
    for name in ("int4", "int8"):
        cosine = float(np.dot(outputs[name], outputs["fp32"]) /
                       (np.linalg.norm(outputs[name]) * np.linalg.norm(outputs["fp32"])))
        assert cosine > 0.98, name
