"""The C++ reference runner (native/), built here against the executorch wheel: parity with the Python
runtime on real bundles, a native embed -> retrieve pipeline, and bad bundles refused cleanly."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from conftest import Built
from deployc.packaging.runtime_config import encode

pytestmark = pytest.mark.slow


def _python_bundle(folder: Path):
    from deployc.runtime.pipeline_runner import Bundle

    return Bundle(folder)


def _native(runner: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(runner), *args], capture_output=True, text=True, timeout=300)


CASES = [  # (program, method, input arrays): fp32 dynamic, 8da8w, 8da4w dynamic, multi-method
    ("mlp_fp32", "forward", lambda g: [g.uniform(-2, 2, (3, 16)).astype(np.float32)]),
    ("mlp_8da8w", "forward", lambda g: [g.uniform(-1, 1, (5, 64)).astype(np.float32)]),
    ("encoder_8da4w", "forward", lambda g: [g.integers(0, 500, (1, 23)).astype(np.int64)]),
    ("two_tower", "encode_text", lambda g: [g.integers(0, 500, (1, 7)).astype(np.int64)]),
    ("two_tower", "forward", lambda g: [g.uniform(0, 1, (1, 3, 16, 16)).astype(np.float32)]),
    ("conv_w8a8", "forward", lambda g: [g.uniform(0, 1, (1, 3, 16, 16)).astype(np.float32)]),
]


@pytest.mark.parametrize("program,method,make", CASES, ids=[f"{p}.{m}" for p, m, _ in CASES])
def test_native_outputs_equal_the_python_runtime(program: str, method: str, make, runner: Path, suite: Built,
                                                 tmp_path: Path) -> None:
    bundle = suite.bundle("arduino_q")
    inputs = make(np.random.default_rng(3))
    files = []
    for i, a in enumerate(inputs):
        files += ["--input", str(tmp_path / f"in{i}.npy")]
        np.save(tmp_path / f"in{i}.npy", a)
    proc = _native(runner, str(bundle), "--program", program, "--method", method, *files, "--output-dir",
                   str(tmp_path), "--repeat", "3")
    assert proc.returncode == 0, proc.stderr[-1000:]
    info = json.loads(proc.stdout)
    assert info["program"] == program and info["median_ms"] >= 0
    native = np.load(tmp_path / "output_0.npy")
    expected = _python_bundle(bundle).call(program, inputs, method)[0]
    assert native.shape == expected.shape
    assert np.max(np.abs(native - expected)) <= 1e-6


def test_native_pipeline_retrieves_like_deployc_run(runner: Path, rag: Path, tmp_path: Path) -> None:
    from deployc.runtime.tokenizer import encode as tokenize
    from deployc.runtime.tokenizer import load_tokenizer

    bundle = rag / "arduino_q"
    python = _python_bundle(bundle)
    tk = load_tokenizer(bundle / "assets" / "tokenizers" / "wordpiece.json", 128)
    for question in ("How many hearts does an octopus have?", "Who first climbed Mount Everest?"):
        ids, mask = tokenize(tk, question)
        np.save(tmp_path / "ids.npy", ids)
        np.save(tmp_path / "mask.npy", mask)
        proc = _native(runner, str(bundle), "--pipeline", "--set", f"query_tokens.input_ids={tmp_path / 'ids.npy'}",
                       "--set", f"query_tokens.attention_mask={tmp_path / 'mask.npy'}", "--text", f"query={question}",
                       "--until", "prompt")
        assert proc.returncode == 0, proc.stderr[-1000:]
        native = json.loads(proc.stdout)["stages"]
        emb = python.call("embedder", [ids, mask])[0]
        found = python.search({"index": "assets/indexes/docs.json", "top_k": 3}, emb)["chunks"]
        assert [c["id"] for c in native["retrieve"]["chunks"]] == [c["id"] for c in found]
        assert np.allclose([c["score"] for c in native["retrieve"]["chunks"]], [c["score"] for c in found], atol=1e-5)
        assert native["prompt"]["text"].endswith(f"Question: {question}\nAnswer:")
    proc = _native(runner, str(bundle), "--pipeline", "--text", "query=x")
    assert proc.returncode == 2 and "needs a tokenizer this runtime lacks" in proc.stderr


def _copy(suite: Built, tmp_path: Path) -> Path:
    copy = tmp_path / "bundle"
    shutil.copytree(suite.bundle("arduino_q"), copy)
    return copy


def test_bad_bundles_are_refused_cleanly(runner: Path, suite: Built, tmp_path: Path) -> None:
    copy = _copy(suite, tmp_path)
    np.save(tmp_path / "x.npy", np.zeros((9, 16), dtype=np.float32))
    proc = _native(runner, str(copy), "--program", "mlp_fp32", "--input", str(tmp_path / "x.npy"))
    assert proc.returncode == 2
    assert "error: mlp_fp32 input x: batch = 9 is outside the declared range [1, 4]" in proc.stderr

    (copy / "conv_w8a8.pte").unlink()
    proc = _native(runner, str(copy))
    assert proc.returncode == 2 and "error: conv_w8a8.pte: missing from the bundle" in proc.stderr

    copy = _copy(suite, tmp_path / "2")
    data = bytearray((copy / "mlp_8da8w.pte").read_bytes())
    data[200] ^= 0xFF
    (copy / "mlp_8da8w.pte").write_bytes(bytes(data))
    proc = _native(runner, str(copy))
    assert proc.returncode == 2 and "error: mlp_8da8w.pte: sha256 does not match runtime.bin" in proc.stderr

    copy = _copy(suite, tmp_path / "3")
    config = json.loads((copy / "runtime.json").read_text())
    (copy / "runtime.bin").write_bytes(encode({**config, "schema_version": 2}))
    proc = _native(runner, str(copy))
    assert proc.returncode == 2
    assert "runtime config schema version 2 is newer than this runner understands (1)" in proc.stderr

    (copy / "runtime.bin").write_bytes(b"\x10\x00\x00\x00NOPE" + b"\x00" * 32)
    proc = _native(runner, str(copy))
    assert proc.returncode == 2 and "not a deployc runtime config" in proc.stderr


def test_native_build_reports_missing_tools(tmp_path: Path, monkeypatch) -> None:
    from deployc.errors import BuildError
    from deployc.native_build import build_runner

    monkeypatch.setenv("PATH", str(tmp_path))  # no cmake, no compiler
    with pytest.raises(BuildError, match="cmake and c\\+\\+ not found; install them, e.g. `apt-get install cmake g\\+\\+"):
        build_runner(tmp_path / "build", lambda _: None)


def test_native_runs_qnn_programs_on_the_emulator_like_python(runner: Path, npu: Built, tmp_path: Path) -> None:
    import os

    from deployc.targets.backends.qnn_host import ENV_LIBRARIES, environment

    bundle = npu.out / "npu" / "1.0.0" / "snapdragon"
    x = np.random.default_rng(5).uniform(0, 1, (1, 3, 32, 32)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    bare = {k: v for k, v in os.environ.items() if k not in (ENV_LIBRARIES, "LD_LIBRARY_PATH", "QNN_SDK_ROOT")}
    args = [str(runner), str(bundle), "--program", "conv_16a8w", "--input", str(tmp_path / "x.npy"), "--output-dir",
            str(tmp_path)]
    proc = subprocess.run(args, capture_output=True, text=True, timeout=300, env=bare)
    assert proc.returncode == 2
    assert ("error: program conv_16a8w runs on the Snapdragon NPU (QNN): this host needs QNN's host libraries"
            in proc.stderr)
    proc = subprocess.run(args, capture_output=True, text=True, timeout=300, env={**bare, **environment()})
    assert proc.returncode == 0, proc.stderr[-1000:]
    assert json.loads(proc.stdout)["program"] == "conv_16a8w"  # QNN's own notes went to stderr
    native = np.load(tmp_path / "output_0.npy")
    expected = _python_bundle(bundle).call("conv_16a8w", [x])[0]
    assert np.array_equal(native, expected)  # the same emulator, the same bytes
