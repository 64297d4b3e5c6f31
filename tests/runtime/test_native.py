"""The C++ reference runner (native/), built here against the executorch wheel: parity with the Python
runtime on real bundles, a native embed -> retrieve pipeline, and bad bundles refused cleanly."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from helpers.bundles import flip_weight_byte, rewrite_config
from helpers.projects import REPO, Built, run_subprocess

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
    assert info["program"] == program and info["median_ms"] > 0
    native = np.load(tmp_path / "output_0.npy")
    expected = _python_bundle(bundle).call(program, inputs, method)[0]
    assert native.shape == expected.shape
    assert np.max(np.abs(native - expected)) <= 1e-6


QUESTIONS = ("How do honeybees find flowers?", "How many keys does a piano have?",
             "Who first climbed Mount Everest?")


def test_native_pipeline_answers_from_text_like_deployc_run(runner: Path, rag: Path) -> None:
    from deployc.pipeline.host.tokenizers import encode as tokenize
    from deployc.pipeline.host.tokenizers import load_tokenizer

    bundle = rag / "arduino_q"
    python = _python_bundle(bundle)
    tk = load_tokenizer(bundle / "assets" / "tokenizers" / "wordpiece.json", 128)
    config = json.loads((bundle / "runtime.json").read_text())
    generate = next(s for s in config["pipeline"]["stages"] if s["op"] == "generate")
    for question in QUESTIONS:
        proc = _native(runner, str(bundle), "--pipeline", "--text", f"query={question}", "--stream")
        assert proc.returncode == 0, proc.stderr[-1000:]
        native = json.loads(proc.stdout)
        stages = native["stages"]
        assert stages["query_tokens"]["input_ids"]["data"] == tokenize(tk, question)[0][0].tolist()
        expected = python.run({"query": question})["outputs"]
        assert [c["id"] for c in native["outputs"]["sources"]] == [c["id"] for c in expected["sources"]]
        assert np.allclose([c["score"] for c in native["outputs"]["sources"]],
                           [c["score"] for c in expected["sources"]], atol=1e-5)
        assert native["outputs"]["answer"] == expected["answer"] != ""
        tokens = python.stage(generate, {"prompt": stages["prompt"]["text"]}, json.loads(generate["params_json"]))["tokens"]
        assert stages["answer"]["tokens"]["data"] == tokens[0].tolist()  # greedy: the same ids
        assert native["outputs"]["answer"] in proc.stderr  # streamed as it was generated
        gen = native["generation"]
        assert gen["tokens"] == len(tokens[0]) and gen["first_token_ms"] > 0 and gen["per_token_ms"] > 0
        assert native["load_ms"] > 0 and native["threads"] == 4  # the arduino_q profile's threads
    # Token ids given for a stage replace its computation (an app that tokenizes elsewhere).
    ids, mask = tokenize(tk, QUESTIONS[0])
    proc = _native(runner, str(bundle), "--pipeline", "--text", "query=ignored", "--until", "retrieve", "--threads",
                   "1", "--set", f"query_tokens.input_ids={_npy(rag.parent, 'ids', ids)}",
                   "--set", f"query_tokens.attention_mask={_npy(rag.parent, 'mask', mask)}")
    assert proc.returncode == 0, proc.stderr[-1000:]
    result = json.loads(proc.stdout)
    assert result["stages"]["retrieve"]["chunks"][0]["source"] == "corpus/honeybees.md" and result["threads"] == 1


def test_deployc_run_on_arm64_retrieves_and_answers_like_x86(rag: Path) -> None:
    """The same bundle through the arm64 runner under qemu (the UNO Q's Cortex-A53): other kernels, the
    same passages (scores within int8 rounding) and, greedy, the same answer."""

    bundle = rag / "arduino_q"
    x86 = run_subprocess("run", str(bundle), "--input", f"query={QUESTIONS[0]}", "--json")
    arm = run_subprocess("run", str(bundle), "--arch", "aarch64", "--input", f"query={QUESTIONS[0]}", "--json",
                         cwd=REPO)
    assert x86.code == 0 and arm.code == 0, arm.err[-1000:]
    a, b = json.loads(x86.out)["outputs"], json.loads(arm.out)["outputs"]
    assert [c["id"] for c in a["sources"]] == [c["id"] for c in b["sources"]]
    assert np.allclose([c["score"] for c in a["sources"]], [c["score"] for c in b["sources"]], atol=0.02)
    assert a["answer"] == b["answer"] != ""


def test_native_pipeline_drives_the_npu_decoder_like_deployc_run(runner: Path, rag: Path) -> None:
    """Snapdragon's bundle: the embedder and the decoder (its static form, on QNN's HTP emulator) both on the
    npu. The runner's driver and deployc run's choose the same tokens from the same prompt."""
    from deployc.targets.backends.qnn.host import environment

    bundle = rag / "snapdragon"
    proc = subprocess.run([str(runner), str(bundle), "--pipeline", "--text", f"query={QUESTIONS[1]}"],
                          capture_output=True, text=True, timeout=600, env={**os.environ, **environment()})
    assert proc.returncode == 0, proc.stderr[-1000:]
    native = json.loads(proc.stdout)
    python = _python_bundle(bundle)
    config = json.loads((bundle / "runtime.json").read_text())
    generate = next(s for s in config["pipeline"]["stages"] if s["op"] == "generate")
    tokens = python.stage(generate, {"prompt": native["stages"]["prompt"]["text"]},
                          json.loads(generate["params_json"]))["tokens"]
    assert native["stages"]["answer"]["tokens"]["data"] == tokens[0].tolist()
    assert "88" in native["outputs"]["answer"]


def _npy(folder: Path, name: str, a: np.ndarray) -> Path:
    np.save(folder / f"{name}.npy", a)
    return folder / f"{name}.npy"


def test_native_pipeline_bad_input_exits_2_naming_the_stage(runner: Path, rag: Path, tmp_path: Path) -> None:
    from deployc.core.digests import bytes_sha256

    bundle = rag / "arduino_q"
    proc = subprocess.run([str(runner), str(bundle), "--pipeline", "--text", b"query=caf\xe9 \xff"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2
    assert "error: stage query_tokens (tokenize): the input is not valid UTF-8 (byte 3)" in proc.stderr

    # A prompt beyond the decoder's context keeps bos and its last tokens: max_seq_len 512 - 48 new tokens.
    long_query = " ".join(["honeybees dance to point at flowers"] * 300)
    proc = _native(runner, str(bundle), "--pipeline", "--text", f"query={long_query}")
    assert proc.returncode == 0, proc.stderr[-1000:]
    native = json.loads(proc.stdout)
    assert len(native["stages"]["query_tokens"]["input_ids"]["data"]) == 128  # the tokenize stage's max_length
    assert native["generation"]["prompt_tokens"] == 464
    python = _python_bundle(bundle).run({"query": long_query})
    assert native["outputs"]["answer"] == python["outputs"]["answer"]
    assert python["generation"]["prompt_tokens"] == 464  # both report the prompt as the decoder saw it

    def with_tokenizer(content: bytes, name: str) -> Path:
        copy = tmp_path / name
        shutil.copytree(bundle, copy)
        (copy / "assets" / "tokenizers" / "wordpiece.json").write_bytes(content)
        config = json.loads((copy / "runtime.json").read_text())
        for a in config["assets"]:
            if a["name"] == "wordpiece":
                a["sha256"] = bytes_sha256(content)
        rewrite_config(copy, config, "assets/tokenizers/wordpiece.json")
        return copy

    from tokenizers import Tokenizer, models

    unigram = Tokenizer(models.Unigram([("<unk>", 0.0), ("a", -1.0)], unk_id=0)).to_str().encode()
    proc = _native(runner, str(with_tokenizer(unigram, "unigram")), "--pipeline", "--text", "query=x")
    assert proc.returncode == 2
    assert ("error: stage query_tokens (tokenize): tokenizer " in proc.stderr
            and "unsupported by the native runtime: model type Unigram" in proc.stderr)
    original = (bundle / "assets" / "tokenizers" / "wordpiece.json").read_bytes()
    cut = with_tokenizer(original[: len(original) // 2], "cut")
    proc = _native(runner, str(cut), "--pipeline", "--text", "query=x")
    assert proc.returncode == 2 and "not a Hugging Face tokenizer.json (corrupted?)" in proc.stderr
    proc = _native(runner, str(with_tokenizer(b"", "empty")), "--pipeline", "--text", "query=x")
    assert proc.returncode == 2 and "error: stage query_tokens (tokenize): tokenizer" in proc.stderr


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
    (copy / "runtime.bin").write_bytes(encode({**config, "schema_version": 3}))
    proc = _native(runner, str(copy))
    assert proc.returncode == 2
    assert "runtime config schema version 3 is newer than this runner understands (2)" in proc.stderr

    (copy / "runtime.bin").write_bytes(b"\x10\x00\x00\x00NOPE" + b"\x00" * 32)
    proc = _native(runner, str(copy))
    assert proc.returncode == 2 and "not a deployc runtime config" in proc.stderr

    # A flipped byte inside one of runtime.bin's numbers still decodes: the lock's sha256 refuses it.
    copy = _copy(suite, tmp_path / "4")
    data = bytearray((copy / "runtime.bin").read_bytes())
    data[len(data) // 2] ^= 0xFF
    (copy / "runtime.bin").write_bytes(bytes(data))
    proc = _native(runner, str(copy))
    assert proc.returncode == 2, proc.stderr[-800:]
    assert "runtime.bin" in proc.stderr
    (copy / "bundle.lock.json").unlink()  # an app may ship without the lock: then runtime.bin is taken as it is
    (copy / "runtime.bin").write_bytes((suite.bundle("arduino_q") / "runtime.bin").read_bytes())
    assert _native(runner, str(copy)).returncode == 0


def test_native_build_reports_missing_tools(tmp_path: Path, monkeypatch) -> None:
    from deployc.core.errors import BuildError
    from deployc.targets.native_build import build_runner

    monkeypatch.setenv("PATH", str(tmp_path))  # no cmake, no compiler
    with pytest.raises(BuildError, match=r"cmake and c\+\+ not found; install them, e.g. `apt-get install cmake g\+\+"):
        build_runner(tmp_path / "build", lambda _: None)


def test_native_build_jni_says_what_it_needs(cli, tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from deployc.core.errors import BuildError
    from deployc.targets.native_build import build_java_api

    r = cli("native", "build", "--jni", "--arch", "aarch64")
    assert r.code == 2 and "--jni builds for this host's JVM; it does not combine with --arch" in r.err
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(BuildError, match=r"javac not found: --jni needs a JDK, e.g. `apt-get install "
                                         r"openjdk-17-jdk-headless junit4`"):
        build_java_api(tmp_path / "build", lambda _: None)


def test_native_runs_qnn_programs_on_the_emulator_like_python(runner: Path, npu: Built, tmp_path: Path) -> None:
    import os

    from deployc.targets.backends.qnn.host import ENV_LIBRARIES, environment

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


def test_self_test_vectors_pass_on_the_host_and_natively_and_catch_a_flipped_weight(
        runner: Path, suite: Built, tmp_path: Path) -> None:

    bundle = suite.bundle("arduino_q")
    config = json.loads((bundle / "runtime.json").read_text())
    vectors = {a["name"]: a["file"] for a in config["assets"] if a["kind"] == "self_test"}
    assert vectors == {f"{p['name']}.self_test": f"selftest/{p['name']}.json" for p in config["programs"]}
    host = run_subprocess("inspect", str(bundle), "--self-test", "--json")
    assert host.code == 0, host.err[-2000:]
    rows = {r["program"]: r for r in json.loads(host.out)["self_test"]}
    mcu = {p["name"] for p in config["programs"] if p["backend"] == "cortex_m"}
    assert mcu and all(rows[n]["status"] == "not-run" and rows[n]["reason"].startswith("not run on this host")
                       for n in mcu)  # Cortex-M programs cannot run here: never "passed"
    rows = {n: r for n, r in rows.items() if n not in mcu}
    assert {r["status"] for r in rows.values()} == {"passed"} and all(r["cases"] >= 1 for r in rows.values())
    proc = _native(runner, str(bundle), "--self-test")
    assert proc.returncode == 0, proc.stderr[-2000:]
    native = {r["program"]: r for r in json.loads(proc.stdout)["programs"]}
    assert {native[n]["status"] for n in mcu} == {"not-run"}
    assert {native[n]["status"] for n in rows} == {"passed"}
    for name, r in rows.items():  # the same vectors, the same runtime kernels, the same formulas
        assert abs(native[name]["min_cosine"] - r["summary"]["min_cosine"]) < 1e-9
        assert native[name]["tolerance_min_cosine"] == r["min_cosine"]

    copy = tmp_path / "flipped"
    shutil.copytree(bundle, copy)
    flip_weight_byte(copy, "mlp_fp32")
    host = run_subprocess("inspect", str(copy), "--self-test", "--json")
    assert host.code == 1 and "self-test failed for mlp_fp32" in host.err
    report = json.loads(host.out)
    assert report["verified"] is True  # the lock matches: only the numbers caught it
    assert {r["program"] for r in report["self_test"] if r["status"] == "failed"} == {"mlp_fp32"}
    proc = _native(runner, str(copy), "--self-test")
    assert proc.returncode == 1
    failed = [r for r in json.loads(proc.stdout)["programs"] if r["status"] == "failed"]
    assert [r["program"] for r in failed] == ["mlp_fp32"] and "cosine" in failed[0]["reason"]


def test_self_test_says_not_run_for_programs_this_host_cannot_run(suite: Built) -> None:

    host = run_subprocess("inspect", str(suite.bundle("snapdragon")), "--self-test", "--json")
    assert host.code == 0, host.err[-2000:]
    rows = json.loads(host.out)["self_test"]
    backends = {r["backend"] for r in rows}
    for r in rows:
        if r["backend"] == "vulkan":
            assert r["status"] == "not-run" and r["reason"].startswith("not run on this host")
        else:
            assert r["status"] == "passed", r
    assert "xnnpack" in backends


def test_quick_check_opens_by_size_and_still_refuses_a_cut_file(runner: Path, suite: Built, tmp_path: Path) -> None:
    copy = _copy(suite, tmp_path)
    proc = _native(runner, str(copy), "--quick-check")
    assert proc.returncode == 0, proc.stderr[-1000:]
    data = bytearray((copy / "mlp_8da8w.pte").read_bytes())
    data[200] ^= 0xFF  # same size: only the full check (or the self-test) can tell
    (copy / "mlp_8da8w.pte").write_bytes(bytes(data))
    assert _native(runner, str(copy), "--quick-check").returncode == 0
    assert "sha256 does not match runtime.bin" in _native(runner, str(copy)).stderr
    (copy / "mlp_8da8w.pte").write_bytes(bytes(data[:-1]))
    proc = _native(runner, str(copy), "--quick-check")
    assert proc.returncode == 2 and "error: mlp_8da8w.pte: size does not match runtime.bin" in proc.stderr


def test_a_decoders_self_test_judges_its_held_out_text_natively_as_on_the_host(runner: Path, rag: Path) -> None:
    """The RAG decoder's vectors carry the start of its held-out text: both runtimes score them as
    next-token distributions (perplexity, KL, top-1) with the same formulas, and the build judged the
    program on those positions too, so both pass."""

    bundle = rag / "arduino_q"
    host = run_subprocess("inspect", str(bundle), "--self-test", "--json")
    assert host.code == 0, host.err[-2000:]
    row = next(r for r in json.loads(host.out)["self_test"] if r["program"] == "llm")
    text = row["text"]
    assert row["status"] == "passed" and text["positions"] >= 8 and row["max_perplexity_ratio"] >= 1.0
    proc = _native(runner, str(bundle), "--self-test")
    assert proc.returncode == 0, proc.stderr[-2000:]
    native = next(r for r in json.loads(proc.stdout)["programs"] if r["program"] == "llm")
    assert native["status"] == "passed" and native["text"]["positions"] == text["positions"]
    for key in ("perplexity", "reference_perplexity", "kl", "top1"):
        assert abs(native["text"][key] - text[key]) <= 1e-9 * max(1.0, abs(text[key])), key
    config = json.loads((bundle / "runtime.json").read_text())
    v = next(p for p in config["programs"] if p["name"] == "llm")["verification"]
    assert v["text_positions"] == 256 and v["perplexity"] / v["reference_perplexity"] <= v[
        "tolerance_max_perplexity_ratio"]
