"""The Java API (native/java, dev.deployc) on a real JVM: JUnit classes of tests/jvm against the RAG bundle,
with deployc run's and deployc-runner's answers to compare with, bad bundles and inputs, cancellation, and
200 open/close cycles in one JVM."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from helpers.bundles import flip_weight_byte
from helpers.jvm import run_junit
from helpers.projects import REPO, Built
from PIL import Image

from deployc.targets.native_build import JavaApi

QUESTIONS = json.loads((REPO / "benchmarks" / "rag_questions.json").read_text())["questions"]


def _expected(runner: Path, bundle: Path) -> list[dict]:
    """Per question of rag_questions.json: deployc run's answer and sources, checked equal to deployc-runner's."""
    sys.path.insert(0, str(REPO / "manifests"))
    from deployc.runtime.pipeline_runner import Bundle

    python = Bundle(bundle)
    rows = []
    for q in QUESTIONS:
        result = python.run({"query": q["question"]})
        outputs = result["outputs"]
        proc = subprocess.run([str(runner), str(bundle), "--pipeline", "--text", f"query={q['question']}"],
                              capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr[-2000:]
        native = json.loads(proc.stdout)
        assert native["outputs"]["answer"] == outputs["answer"]
        assert [c["id"] for c in native["outputs"]["sources"]] == [c["id"] for c in outputs["sources"]]
        rows.append({"question": q["question"], "answer": outputs["answer"],
                     "source_ids": [c["id"] for c in outputs["sources"]],
                     "first_source": outputs["sources"][0]["source"], "tokens": native["generation"]["tokens"]})
    return rows


@pytest.mark.slow
def test_the_java_api_answers_like_deployc_run_and_fails_cleanly(java_api: JavaApi, runner: Path, rag: Path,
                                                                  suite: Built, tmp_path: Path) -> None:
    bundle = rag / "arduino_q"
    expected = _expected(runner, bundle)
    assert sum(r["first_source"] == q["source"] for r, q in zip(expected, QUESTIONS)) >= 11
    (tmp_path / "expected.json").write_text(json.dumps(expected))
    corrupt = tmp_path / "corrupt"
    shutil.copytree(bundle, corrupt)
    data = bytearray((corrupt / "runtime.bin").read_bytes())
    data[len(data) // 2] ^= 0xFF
    (corrupt / "runtime.bin").write_bytes(bytes(data))
    flipped = tmp_path / "flipped"
    shutil.copytree(suite.bundle("arduino_q"), flipped)
    flip_weight_byte(flipped, "mlp_fp32")
    proc = run_junit(java_api, tmp_path, ["dev.deployc.BundleTest"], {
        "deployc.bundle": str(bundle), "deployc.expected": str(tmp_path / "expected.json"),
        "deployc.corrupt": str(corrupt), "deployc.flipped": str(flipped)})
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-6000:]
    assert "OK (9 tests)" in proc.stdout
    assert "WARNING in native method" not in proc.stdout + proc.stderr  # -Xcheck:jni found no misuse
    growth = int(proc.stdout.split("rss growth over 200 open/close cycles: ")[1].split()[0])
    assert growth < 16 * 1024


def test_pixels_and_samples_reach_the_runtime_as_lossless_files(java_api: JavaApi, tmp_path: Path) -> None:
    from deployc.pipeline.host.sounds import decode_wav

    proc = run_junit(java_api, tmp_path, ["dev.deployc.InputsTest"], {"deployc.out": str(tmp_path)})
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    pixels = np.asarray(Image.open(tmp_path / "pixels.png"))
    i = np.arange(35).reshape(5, 7)
    assert pixels.shape == (5, 7, 3)
    assert np.array_equal(pixels, np.stack([(i * 37) & 0xFF, (i * 11) & 0xFF, (255 - i * 5) & 0xFF], -1))
    samples, rate = decode_wav((tmp_path / "samples.wav").read_bytes())
    assert rate == 22050 and samples.shape == (1000,)
    assert np.array_equal(samples, (np.sin(np.arange(1000) * 0.05) * 0.5).astype(np.float32))
