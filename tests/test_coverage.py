"""The CI subset of the architecture coverage table (benchmarks/coverage.py builds all of it): one
architecture per family, each built from its saved directory through one manifest, verified against
eager PyTorch: on the CPU in fp32 and in static int8 (w8a8, convolutions included); on the Snapdragon
NPU (QNN, through the HTP emulator) in fp16, and a vision transformer in w8a8 (its 16-bit rule)."""

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


# On the NPU: an encoder whose mask indexing splits the graph into two QNN delegates (BERT), a waveform
# encoder with weight norm (wav2vec2), and DeiT in w8a8 (its 16-bit rule). Kept to three: six rows (with the
# T5 encoder, deployc's Llama prefill and Depth Anything, all passing) took 7 min on 2 cores; the benchmark
# (benchmarks/coverage.py --unit npu) builds them all.
NPU_ROWS = {("bert", "fp16"), ("wav2vec2", "fp16"), ("deit", "w8a8")}


@pytest.fixture(scope="module")
def npu_coverage(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict]:
    folder = tmp_path_factory.mktemp("npu-coverage")
    archs = [a for a in ARCHS if a.name in {name for name, _ in NPU_ROWS}]
    text = manifest(archs, ["fp16", "w8a8"], unit="npu", rows=NPU_ROWS)
    path = make_project(folder / "project", text, "coverage.yaml")
    assert save(archs, folder / "project" / "hf") == {}
    # ~4 minutes alone on 2 cores; it timed out at 10 beside a second suite.
    result, report = build_json(path, folder / "dist", folder / "cache", "--jobs", "2", timeout=1500)
    assert report, result.err[-3000:]
    return {u["model"]: u for u in report["units"]}


@pytest.mark.slow
@pytest.mark.parametrize("arch,scheme", sorted(NPU_ROWS))
def test_each_family_builds_and_verifies_on_the_npu(npu_coverage: dict[str, dict], arch: str, scheme: str) -> None:
    unit = npu_coverage[f"{arch}_{scheme}"]
    assert (unit["unit"], unit["backend"], unit["quantization"]) == ("npu", "qnn", scheme)
    assert unit["status"] == "built", unit["failure"]
    v = unit["verification"]
    assert v["status"] == "passed", v
    assert v["metrics"]["min_sqnr_db"] >= (35.0 if scheme == "fp16" else 20.0)
    if arch == "bert":  # each of the two context binaries keeps its own stamp (qnn.py, _unstamp)
        assert unit["delegates"] == {"QnnBackend": 2}
