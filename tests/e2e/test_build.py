"""The build engine, through the real CLI: torch.export -> quantize -> lower -> .pte -> executorch.runtime.

The suite manifest (tests/helpers/suites.py) is built once per session; see conftest.py `suite`.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from helpers.projects import Built, build_json, make_project, run_subprocess

from deployc.core.digests import file_sha256

pytestmark = pytest.mark.slow


def test_every_unit_built_and_both_bundles_written(suite: Built) -> None:
    statuses = {(u["model"], u["target"]): (u["unit"], u["backend"], u["status"]) for u in suite.report["units"]}
    assert statuses == {
        ("mlp_fp32", "snapdragon"): ("cpu", "xnnpack", "built"),
        ("mlp_fp32", "arduino_q"): ("cpu", "xnnpack", "built"),
        ("mlp_8da8w", "snapdragon"): ("cpu", "xnnpack", "built"),
        ("mlp_8da8w", "arduino_q"): ("cpu", "xnnpack", "built"),
        ("conv_w8a8", "snapdragon"): ("npu", "qnn", "built"),  # static and w8a8: the NPU
        ("conv_w8a8", "arduino_q"): ("cpu", "xnnpack", "built"),
        ("encoder_8da4w", "snapdragon"): ("cpu", "xnnpack", "built"),
        ("encoder_8da4w", "arduino_q"): ("cpu", "xnnpack", "built"),
        ("two_tower", "snapdragon"): ("cpu", "xnnpack", "built"),
        ("two_tower", "arduino_q"): ("cpu", "xnnpack", "built"),
        ("tiny", "snapdragon"): ("gpu", "vulkan", "built"),
        ("tiny", "arduino_q"): ("mcu", "cortex_m", "built"),
    }
    assert suite.report["ok"] and set(suite.report["bundles"]) == {"snapdragon", "arduino_q"}
    # A program shared by two targets is built once: 9 distinct programs in the cache for 12 units.
    entries = list((suite.cache / "programs").glob("*/*/entry.json"))
    assert len(entries) == 9


def test_multi_method_program(suite: Built) -> None:
    u = suite.unit("two_tower", "arduino_q")
    v = u["verification"]
    assert v["status"] == "passed" and u["quantization"] == "8da8w"
    assert u["stayed_float"] == ["image.0"]  # 8da8w quantizes linears: the image tower's convolution says so
    assert [(p["method"], p["dims"]) for p in v["points"]] == [
        ("forward", {"seq": 2}), ("forward", {"seq": 9}), ("forward", {"seq": 16}),
        ("encode_text", {"seq": 2}), ("encode_text", {"seq": 9}), ("encode_text", {"seq": 16})]
    config = json.loads((suite.bundle("arduino_q") / "runtime.json").read_text())
    program = next(p for p in config["programs"] if p["name"] == "two_tower")
    methods = {m["name"]: m for m in program["methods"]}
    assert set(methods) == {"forward", "encode_text", "get_embedding_dim"}
    assert [t["name"] for t in methods["forward"]["inputs"]] == ["image"]
    assert [t["name"] for t in methods["forward"]["outputs"]] == ["image_embedding"]
    assert methods["encode_text"]["inputs"][0]["shape"][1] == {"value": -1, "symbol": "seq", "min": 2, "max": 16,
                                                               "multiple_of": 1}
    assert [t["name"] for t in methods["encode_text"]["outputs"]] == ["text_embedding"]
    assert methods["get_embedding_dim"]["inputs"] == [] and methods["encode_text"]["delegates"] == ["XnnpackBackend"]


def test_the_build_says_which_layers_a_scheme_left_float(suite: Built, tmp_path: Path) -> None:
    """From the cache, as a user reads it: 8da8w quantizes linears, so two_tower's convolution stays float."""
    shutil.copytree(suite.cache, tmp_path / "cache")
    r = run_subprocess("build", str(suite.manifest), "--out", str(tmp_path / "dist"), "--cache-dir",
                       str(tmp_path / "cache"), cwd=suite.manifest.parent)
    assert r.code == 0, r.err[-2000:]
    assert "stayed float: two_tower on arduino_q (8da8w): 1 weighted layer(s) not quantized: image.0" in r.out
    assert "stayed float: mlp_8da8w" not in r.out  # every linear in int8


def test_fp32_matches_eager_at_min_mid_max(suite: Built) -> None:
    v = suite.unit("mlp_fp32", "arduino_q")["verification"]
    assert v["status"] == "passed"
    assert [p["dims"] for p in v["points"]] == [{"batch": 1}, {"batch": 2}, {"batch": 4}]
    assert v["metrics"]["min_cosine"] > 0.99999 and v["metrics"]["min_sqnr_db"] > 100
    assert v["metrics"]["max_abs"] < 1e-5
    assert v["tolerance"] == {"min_cosine": 0.9999, "min_sqnr_db": 60.0, "max_abs": None, "tokens": 0,
                              "max_perplexity_ratio": None, "max_kl": None, "min_top1": None,
                              "min_topk_overlap": None}
    assert v["tokens"] is None  # not a text-generation program


def test_8da8w_is_quantized_and_within_tolerance(suite: Built) -> None:
    u = suite.unit("mlp_8da8w", "snapdragon")
    m = u["verification"]["metrics"]
    assert u["verification"]["status"] == "passed"
    assert 0.999 < m["min_cosine"] < 1.0 and 25 < m["min_sqnr_db"] < 60  # quantized: close, not exact
    assert u["size_bytes"] < 150_000  # fp32 weights of this MLP alone are 349 KB
    assert u["delegated_share"] == 1.0 and u["delegates"] == {"XnnpackBackend": 1}
    assert u["planned_memory_bytes"]["forward"] > 0


def test_w8a8_conv_folds_batch_norm_and_calibrates_on_the_dataset(suite: Built) -> None:
    from deployc.load.project import load_project
    from deployc.plan.planner import make_plan
    from deployc.plan.toolchain import detect

    plan = make_plan(load_project(suite.manifest, env={}), detect({}))
    recipe = next(u for u in plan.units() if u.model == "conv_w8a8").quantize.recipe
    assert recipe.calibration_dataset == "calib/conv.pt"
    assert recipe.calibration_dataset_sha256 == file_sha256(suite.folder / "calib" / "conv.pt")
    u = suite.unit("conv_w8a8", "arduino_q")
    assert u["verification"]["status"] == "passed"
    assert u["verification"]["metrics"]["min_cosine"] > 0.99
    assert not any("batch_norm" in op for op in u["non_delegated_ops"])
    assert "XnnpackBackend" in u["delegates"]


def test_8da4w_dynamic_sequence(suite: Built) -> None:
    u = suite.unit("encoder_8da4w", "arduino_q")
    v = u["verification"]
    assert v["status"] == "passed" and v["metrics"]["min_cosine"] >= 0.98
    assert [p["dims"] for p in v["points"]] == [{"seq": 4}, {"seq": 18}, {"seq": 32}]
    assert 0 < u["delegated_share"] < 1 and "aten.embedding.default" in u["non_delegated_ops"]


def test_vulkan_program_has_vulkan_delegates_and_is_not_run(suite: Built) -> None:
    u = suite.unit("tiny", "snapdragon")
    assert u["delegates"] == {"VulkanBackend": 1}
    assert u["verification"]["status"] == "not-run"
    assert u["verification"]["reason"].startswith("not run on this host: Vulkan")


def test_cortex_m_program_is_static_int8_within_mcu_budgets(suite: Built) -> None:
    u = suite.unit("tiny", "arduino_q")
    # Computed on the cortex_m reference kernels (no runtime here has them), and said so everywhere.
    assert u["verification"]["status"] == "passed" and u["verification"]["metrics"]["min_cosine"] > 0.99
    assert u["verification"]["ran_on"] == "cortex_m reference kernels on this host; not the device runtime"
    config = json.loads((suite.bundle("arduino_q") / "runtime.json").read_text())
    tiny = next(p for p in config["programs"] if p["name"] == "tiny")
    assert tiny["verification"]["reason"] == u["verification"]["ran_on"]
    (forward,) = tiny["methods"]
    assert "cortex_m::quantized_linear.out" in forward["operators"] and not forward["delegates"]
    assert forward["planned_memory_bytes"] <= 512 * 1024
    assert tiny["size_bytes"] <= int(1.5 * 2**20)


def test_bundle_contents_match_lock_and_runtime_config(suite: Built) -> None:
    bundle = suite.bundle("snapdragon")
    lock = json.loads((bundle / "bundle.lock.json").read_text())
    on_disk = {p.relative_to(bundle).as_posix() for p in bundle.rglob("*") if p.is_file()}
    assert on_disk == set(lock["files"]) | {"bundle.lock.json"}
    for name, info in lock["files"].items():
        assert file_sha256(bundle / name) == info["sha256"] and (bundle / name).stat().st_size == info["size"]
    assert lock["tools"]["executorch"] == "1.5.1" and lock["tools"]["flatbuffers"]
    config = json.loads((bundle / "runtime.json").read_text())
    assert config["bundle"] == {"name": "suite", "version": "1.0.0", "target": "snapdragon", "profile": "snapdragon"}
    enc = next(p for p in config["programs"] if p["name"] == "encoder_8da4w")
    assert enc["threads"] == 4 and enc["warmup"] == 1 and enc["backend"] == "xnnpack"
    (forward,) = enc["methods"]
    assert forward["inputs"] == [{"name": "tokens", "dtype": "int64", "shape": [
        {"value": 1, "min": 1, "max": 1, "multiple_of": 1},
        {"value": -1, "symbol": "seq", "min": 4, "max": 32, "multiple_of": 1}]}]
    assert forward["outputs"] == [{"name": "output_0", "dtype": "float32", "shape": [
        {"value": 1, "min": 1, "max": 1, "multiple_of": 1}, {"value": 64, "min": 64, "max": 64, "multiple_of": 1}]}]
    # the int4 embedding table runs on ExecuTorch's quantized kernel, outside the delegate
    assert "quantized_decomposed::embedding_4bit.out" in forward["operators"]
    assert forward["delegates"] == ["XnnpackBackend"]


def test_archive_is_deterministic_and_normalized(suite: Built) -> None:
    archive = suite.out / "suite" / "1.0.0" / "suite-1.0.0-arduino_q.tar.gz"
    with tarfile.open(archive) as tar:
        members = tar.getmembers()
    names = [m.name for m in members]
    assert names == sorted(names) and all(n.startswith("arduino_q/") for n in names)
    assert {(m.mtime, m.uid, m.gid, m.mode) for m in members} == {(0, 0, 0, 0o644)}
    assert archive.read_bytes()[4:8] == b"\x00\x00\x00\x00"  # gzip header carries no timestamp


def test_noop_rebuild_hits_the_cache_without_importing_torch(suite: Built) -> None:
    """Nor numpy, flatbuffers, Ray or the worker pool: a no-op build hashes and compares, it runs nothing."""
    heavy = ("torch", "numpy", "flatbuffers", "ray", "multiprocessing", "executorch")
    code = ("import sys; from deployc.cli.app import main;"
            f"rc = main(['build', 'suite.yaml', '--out', {str(suite.out)!r}, '--cache-dir', {str(suite.cache)!r},"
            f" '--json']); print('HEAVY', sorted(m for m in {heavy!r} if m in sys.modules), file=sys.stderr); "
            "sys.exit(rc)")
    proc = subprocess.run([sys.executable, "-c", code], cwd=suite.folder, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "HEAVY []" in proc.stderr
    report = json.loads(proc.stdout)
    assert {u["status"] for u in report["units"]} == {"cached"}


def test_rebuilds_only_what_changed_and_recovers_corrupt_entries(suite: Built, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    shutil.copytree(suite.cache, cache)
    project = tmp_path / "project"
    shutil.copytree(suite.folder, project)
    manifest = project / "suite.yaml"
    manifest.write_text(manifest.read_text().replace("kwargs: {features: 16, hidden: 32, classes: 4}}\n    inputs:\n"
                                                     "      x: {shape: [batch, 16]",
                                                     "kwargs: {features: 16, hidden: 48, classes: 4}}\n    inputs:\n"
                                                     "      x: {shape: [batch, 16]", 1))
    key = suite.unit("mlp_8da8w", "arduino_q")["program_key"]
    pte = cache / "programs" / key[:2] / key / "program.pte"
    data = bytearray(pte.read_bytes())
    data[100] ^= 0xFF
    pte.write_bytes(bytes(data))
    result, report = build_json(manifest, tmp_path / "dist", cache, "--target", "arduino_q")
    assert result.code == 0, result.err[-2000:]
    statuses = {u["model"]: u["status"] for u in report["units"]}
    assert statuses == {"mlp_fp32": "built", "mlp_8da8w": "built", "conv_w8a8": "cached",
                        "encoder_8da4w": "cached", "two_tower": "cached", "tiny": "cached"}
    assert f"cache entry {key[:12]} is corrupt (program.pte does not match its sha256); rebuilding" in result.err
    rebuilt = next(u for u in report["units"] if u["model"] == "mlp_8da8w")
    assert file_sha256(Path(rebuilt["pte"])) == file_sha256(suite.bundle("arduino_q") / "mlp_8da8w.pte")


FAILING = """\
apiVersion: deployc/v1
name: failing
version: 0.1.0
targets: [tiny_board]
models:
  branchy:
    source: {factory: "models.testnets:branchy"}
    inputs:
      x: {shape: [2, 8]}
  big:
    source: {factory: "models.small:mlp"}
    inputs:
      x: {shape: [1, 64]}
  fine:
    source: {factory: "models.small:mlp", kwargs: {features: 8, hidden: 8, classes: 2}}
    inputs:
      x: {shape: [1, 8]}
"""

TINY_BOARD = """\
apiVersion: deployc/v1
name: tiny_board
device: {soc: X, os: linux, abi: arm64-v8a}
units:
  - {name: cpu, backend: xnnpack, quantization: [fp32], budgets: {storage: 64KiB}}
"""


def test_failures_are_reported_per_unit_while_others_build(tmp_path: Path) -> None:
    manifest = make_project(tmp_path / "project", FAILING, "failing.yaml")
    (tmp_path / "project" / "targets" / "tiny_board.yaml").write_text(TINY_BOARD)
    result, report = build_json(manifest, tmp_path / "dist", tmp_path / "cache")
    assert result.code == 1
    assert "Traceback" not in result.err
    units = {u["model"]: u for u in report["units"]}
    assert units["fine"]["status"] == "built" and units["fine"]["verification"]["status"] == "passed"
    assert units["branchy"]["status"] == "failed" and units["branchy"]["failure"]["step"] == "export"
    error = units["branchy"]["failure"]["error"]
    assert error.startswith("torch.export failed:") and "hint: the model branches on tensor values" in error
    big = units["big"]
    assert big["status"] == "failed" and big["failure"]["step"] == "budget"
    size = big["size_bytes"]
    assert big["failure"]["error"] == (f"program size {size / 1024:.2f} KiB ({size} B) exceeds the storage budget "
                                       f"64.00 KiB (65536 B) of unit 'cpu' on target 'tiny_board'")
    assert report["bundles"] == {} and report["bundles_not_written"] == {"tiny_board": "2 unit(s) failed: branchy, big"}
    assert not (tmp_path / "dist" / "failing" / "0.1.0" / "tiny_board").exists()


def test_a_runtime_failure_in_verification_is_contained(tmp_path: Path) -> None:
    import torch

    from deployc.graph.verify import Calls, start_verifier, verify

    broken = tmp_path / "broken.pte"
    broken.write_bytes(b"\x00" * 64)
    x = [torch.ones(1, 4)]
    result = verify(broken, Calls([("forward", {}, x)], [[torch.ones(1, 4)]]), start_verifier())
    assert result.status == "error" and result.reason.startswith("executorch.runtime crashed (exit code 1)")


def test_a_crash_is_reported_by_the_runtime_s_first_complaint_with_its_error_named() -> None:
    from deployc.graph.verify import crash_reason

    stderr = """\
[cpuinfo_utils.cpp:109] Failed to open midr file /sys/devices/system/cpu/cpu0/regs/identification/midr_el1
[ERROR] [Qnn ExecuTorch]:  <E> unexpected GraphHtpSettings option 66
[program.cpp:515] constant_buffer path is disabled (ET_ENABLE_DEPRECATED_CONSTANT_BUFFER=0). Please re-export the PTE file.
[tensor_parser_portable.cpp:189] getTensorDataPtr() failed: 0x23
[method.cpp:602] Failed parsing tensor at index 0: 0x23
Traceback (most recent call last):
  File "verify_worker.py", line 37, in main
    methods = {name: program.load_method(name) for name in dict.fromkeys(name for name, _ in checks)}
                     ^^^^^^^^^^^^^^^^^^^^^^^^^
RuntimeError: Failed to load method forward, error: 0x:23
[INFO] [Qnn ExecuTorch]: Destroy Qnn context
"""
    assert crash_reason(stderr, 1) == (
        "executorch.runtime crashed (exit code 1): [program.cpp:515] constant_buffer path is disabled "
        "(ET_ENABLE_DEPRECATED_CONSTANT_BUFFER=0). Please re-export the PTE file. | [tensor_parser_portable.cpp:189] "
        "getTensorDataPtr() failed: 0x23 | RuntimeError: Failed to load method forward, error: 0x:23 (InvalidProgram)")
    assert crash_reason("", -11) == "executorch.runtime crashed (killed by signal 11)"


PROMISES = """\
apiVersion: deployc/v1
name: promises
version: 0.1.0
targets: [arduino_q]
models:
  strict:
    source: {factory: "models.small:mlp", kwargs: {features: 8, hidden: 16, classes: 2}}
    inputs:
      x: {shape: [1, 8]}
    quantization: 8da8w
    verify: {min_sqnr_db: 200}
  misdeclared:
    source: {factory: "models.small:mlp", kwargs: {features: 8, hidden: 16, classes: 2}}
    inputs:
      x: {shape: [1, 8]}
    outputs:
      logits: {shape: [1, 3]}
"""


def test_a_missed_tolerance_or_a_wrong_output_declaration_fails_the_unit(tmp_path: Path) -> None:
    manifest = make_project(tmp_path / "project", PROMISES, "promises.yaml")
    r = run_subprocess("build", str(manifest), "--out", str(tmp_path / "dist"), "--cache-dir", str(tmp_path / "cache"),
                       cwd=manifest.parent)
    assert r.code == 1 and "Traceback" not in r.err
    strict = next(line for line in r.out.splitlines() if line.startswith("FAILED strict"))
    sqnr = strict.split("SQNR ")[1].split(" dB <")[0]
    assert 20 < float(sqnr) < 200  # int8: close to eager, far from exact
    assert strict == (f"FAILED strict on arduino_q (cpu) at verify: verification against eager PyTorch missed: "
                      f"SQNR {sqnr} dB < 200.0 dB")
    # Located at the declaration (line 17, column 7 of the manifest: `logits:` under `outputs:`).
    assert (f"{manifest}:17:7: error: FAILED misdeclared on arduino_q (cpu) at outputs: models.misdeclared.outputs: "
            "output logits: declared float32[1, 3], the model returns float32[1, 2]") in r.out
    assert "no bundle for arduino_q: 2 unit(s) failed: strict, misdeclared" in r.out
    assert not (tmp_path / "dist" / "promises" / "0.1.0" / "arduino_q").exists()


def test_library_output_goes_to_unit_logs_not_the_terminal(suite: Built) -> None:
    err = suite.result.err
    for noise in ("cpuinfo_utils", "_C_mxfp8", "Warning:", "DeprecationWarning", "Traceback"):
        assert noise not in err
    logs = {p.name for p in (suite.cache / "logs").glob("*.log")}
    assert "mlp_8da8w--snapdragon--cpu.log" in logs or "mlp_8da8w--arduino_q--cpu.log" in logs
    assert any(name.startswith("worker-") for name in logs)
    unit_log = next((suite.cache / "logs").glob("conv_w8a8--*.log")).read_text()
    assert unit_log.startswith("=== conv_w8a8@")


EMPTY_CACHE = """\
apiVersion: deployc/v1
name: empty-cache
version: 0.1.0
targets: [arduino_q]
models:
  net:
    source: {factory: "models.testnets:empty_cache"}
    inputs:
      x: {shape: [1, 8]}
"""


@pytest.mark.full  # a build for one edge case
def test_a_program_whose_only_outside_constant_is_empty_loads_from_its_file(tmp_path: Path) -> None:
    """The empty constant a cache starts from is dropped once nothing reads it. Kept, it was the program's
    only constant outside the delegate: a constant segment of zero bytes, which ExecuTorch's runtime cannot
    load from a file (error 0x23, "constant_buffer path is disabled"; 13 transformers decoders on the npu)."""
    import torch
    from executorch.runtime import Runtime

    manifest = make_project(tmp_path / "project", EMPTY_CACHE, "empty.yaml")
    _, report = build_json(manifest, tmp_path / "dist", tmp_path / "cache")
    [unit] = report["units"]
    assert unit["status"] == "built", unit["failure"]
    assert unit["verification"]["status"] == "passed" and unit["verification"]["metrics"]["min_cosine"] > 0.9999
    assert set(unit["delegates"]) == {"XnnpackBackend"}
    method = Runtime.get().load_program(tmp_path / "dist" / "empty-cache" / "0.1.0" / "arduino_q" / "net.pte")
    [y] = method.load_method("forward").execute([torch.ones(1, 8)])
    assert y.shape == (1, 8)
