"""The Java API (native/java, dev.deployc) on a real JVM: JUnit classes of tests/jvm against the RAG bundle,
with deployc run's and deployc-runner's answers to compare with, bad bundles and inputs, cancellation, and
200 open/close cycles in one JVM."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from helpers.bundles import flip_weight_byte
from helpers.jvm import bundle_test, expected_answers, passed_cleanly, run_junit
from helpers.projects import REPO, Built
from PIL import Image

from deployc.targets.native_build import JavaApi

QUESTIONS = json.loads((REPO / "benchmarks" / "rag_questions.json").read_text())["questions"]


@pytest.mark.slow
def test_the_java_api_answers_like_deployc_run_and_fails_cleanly(java_api: JavaApi, runner: Path, rag: Path,
                                                                  suite: Built, tmp_path: Path) -> None:
    """The RAG bundle: the 12 questions of rag_questions.json, answers and sources (make test-all: the RAG
    bundle is built there; tests/e2e/test_gguf_models.py runs the same JUnit class in make test)."""
    bundle = rag / "arduino_q"
    expected = expected_answers(runner, bundle, "query", [q["question"] for q in QUESTIONS])
    assert sum(r["first_source"] == q["source"] for r, q in zip(expected, QUESTIONS)) >= 11
    flipped = tmp_path / "flipped"
    shutil.copytree(suite.bundle("arduino_q"), flipped)
    flip_weight_byte(flipped, "mlp_fp32")
    proc = bundle_test(java_api, tmp_path, bundle, "rag-offline", "query", expected, flipped)
    assert passed_cleanly(proc, 9) < 2 * 1024


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
