"""The CI subset of the architecture coverage table (benchmarks/coverage.py builds all of it): one
architecture per family, each built from its saved directory through one manifest in fp32 and in static
int8 (w8a8, convolutions included), verified against eager PyTorch."""

from __future__ import annotations

import sys

import pytest
from conftest import REPO, build_json, make_project

sys.path.insert(0, str(REPO / "benchmarks"))
from hf_zoo import ARCHS, manifest, save

SUBSET = ("bert", "llama", "resnet", "whisper")  # encoder, decoder (text generation), conv net, audio


@pytest.fixture(scope="module")
def coverage(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict]:
    folder = tmp_path_factory.mktemp("coverage")
    archs = [a for a in ARCHS if a.name in SUBSET]
    path = make_project(folder / "project", manifest(archs, ["fp32", "w8a8"]), "coverage.yaml")
    assert save(archs, folder / "project" / "hf") == {}
    result, report = build_json(path, folder / "dist", folder / "cache", "--jobs", "2")
    assert report, result.err[-3000:]
    return {u["model"]: u for u in report["units"]}


@pytest.mark.slow
@pytest.mark.parametrize("arch", SUBSET)
@pytest.mark.parametrize("scheme", ["fp32", "w8a8"])
def test_each_family_builds_and_verifies(coverage: dict[str, dict], arch: str, scheme: str) -> None:
    unit = coverage[f"{arch}_{scheme}"]
    assert unit["status"] == "built", unit["failure"]
    v = unit["verification"]
    assert v["status"] == "passed", v
    assert v["metrics"]["min_cosine"] >= (0.9999 if scheme == "fp32" else 0.98)
    if arch == "llama":
        assert v["tokens"]["generated"] == 32 and v["tokens"]["prompts"] == 8
        if scheme == "fp32":
            assert v["tokens"]["matched"] == 32
    if scheme == "w8a8":
        assert unit["quantization"] == "w8a8"
