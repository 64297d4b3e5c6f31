"""Bundles: runtime.bin vs the committed schema, lock verification, inspect, diff, immutability,
byte-reproducibility across processes and worker counts, and crash safety at every kill point."""

from __future__ import annotations

import io
import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from helpers.projects import Built, build_json, make_project, run_subprocess
from helpers.suites import TINY

from deployc.build.cache import Cache
from deployc.cli.reproducibility import compare_trees
from deployc.packaging.inspection import verify_bundle
from deployc.packaging.runtime_config import (
    SCHEMA_PATH,
    ConfigError,
    decode,
    encode,
    normalize,
)

pytestmark = pytest.mark.slow


def _flatc() -> str:
    for candidate in ("/usr/bin/flatc", shutil.which("flatc")):
        if candidate and Path(candidate).is_file():
            return candidate
    pytest.fail("flatc not found: `make test` installs Debian's flatbuffers-compiler")


def test_runtime_bin_decoded_by_standard_flatc_equals_runtime_json(suite: Built, tmp_path: Path) -> None:
    bundle = suite.bundle("arduino_q")
    proc = subprocess.run([_flatc(), "--json", "--strict-json", "--defaults-json", "--raw-binary", "-o", str(tmp_path),
                           str(SCHEMA_PATH), "--", str(bundle / "runtime.bin")], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    from_flatc = json.loads((tmp_path / "runtime.json").read_text())
    runtime_json = json.loads((bundle / "runtime.json").read_text())
    assert from_flatc == runtime_json
    assert decode((bundle / "runtime.bin").read_bytes()) == runtime_json
    assert (bundle / "runtime.bin").read_bytes()[4:8] == b"DPLC"
    assert runtime_json["schema_version"] == 2 and len(runtime_json["programs"]) == 6


def test_newer_or_foreign_runtime_config_refused() -> None:
    newer = encode({"schema_version": 3, "deployc_version": "9.0.0"})
    with pytest.raises(ConfigError, match="schema version 3 is newer than this deployc understands"):
        decode(newer)
    with pytest.raises(ConfigError, match="not a deployc runtime config"):
        decode(b"\x10\x00\x00\x00XXXX" + b"\x00" * 16)
    with pytest.raises(ValueError, match=r"fields not in runtime_config\.fbs: colour"):
        normalize({"colour": "red"})


def test_inspect_bundle_archive_and_pte(suite: Built, cli) -> None:
    bundle = suite.bundle("snapdragon")
    r = cli("inspect", str(bundle), "--json")
    assert r.code == 0, r.err
    info = json.loads(r.out)
    assert info["verified"] and info["problems"] == []
    assert {p["name"] for p in info["programs"]} == {"mlp_fp32", "mlp_8da8w", "conv_w8a8", "encoder_8da4w",
                                                    "two_tower", "tiny"}
    assert info["sizes"]["mlp_8da8w.pte"] == next(p for p in info["programs"] if p["name"] == "mlp_8da8w")["size_bytes"]
    r = cli("inspect", str(suite.out / "suite" / "1.0.0" / "suite-1.0.0-snapdragon.tar.gz"))
    assert r.code == 0 and "verified against bundle.lock.json: ok" in r.out
    # What a user sees is deployc's own output: torch's and torchao's import-time notes go to the log.
    fresh = run_subprocess("inspect", str(bundle))
    assert fresh.code == 0 and fresh.err == "" and "Failed to load" not in fresh.out, fresh.err
    r = cli("inspect", str(bundle / "tiny.pte"), "--json")
    assert r.code == 0
    pte = json.loads(r.out)
    assert pte["methods"][0]["name"] == "forward" and pte["methods"][0]["delegates"] == ["VulkanBackend"]


def test_inspect_reports_tampering(suite: Built, tmp_path: Path, cli) -> None:
    copy = tmp_path / "bundle"
    shutil.copytree(suite.bundle("arduino_q"), copy)
    data = bytearray((copy / "mlp_fp32.pte").read_bytes())
    data[-1] ^= 1
    (copy / "mlp_fp32.pte").write_bytes(bytes(data))
    (copy / "conv_w8a8.pte").unlink()
    (copy / "extra.txt").write_text("x")
    r = cli("inspect", str(copy), "--json")
    assert r.code == 1
    assert json.loads(r.out)["problems"] == ["extra.txt: not listed in the lock", "conv_w8a8.pte: missing",
                                             "mlp_fp32.pte: sha256 differs from the lock"]


def test_inspect_refuses_unsafe_archive(tmp_path: Path, cli) -> None:
    evil = tmp_path / "evil.tar.gz"
    with tarfile.open(evil, "w:gz") as tar:
        info = tarfile.TarInfo("../outside.txt")
        info.size = 2
        tar.addfile(info, io.BytesIO(b"hi"))
    r = cli("inspect", str(evil))
    assert r.code == 2
    assert "archive has unsafe members (absolute, '..', links, devices or sparse files): ../outside.txt" in r.err
    assert not (tmp_path.parent / "outside.txt").exists()


def test_diff(suite: Built, cli) -> None:
    r = cli("diff", str(suite.bundle("snapdragon")), str(suite.bundle("snapdragon")))
    assert r.code == 0 and r.out.strip() == "identical"
    r = cli("diff", str(suite.bundle("snapdragon")), str(suite.bundle("arduino_q")), "--json")
    assert r.code == 0
    d = json.loads(r.out)
    changed = {f["file"] for f in d["files"]}
    assert {"tiny.pte", "runtime.json", "runtime.bin"} <= changed
    assert "mlp_8da8w.pte" not in changed  # one program shared by both targets
    tiny = next(p for p in d["programs"] if p["program"] == "tiny")
    assert tiny["changes"]["backend"] == ["vulkan", "cortex_m"]


def test_release_is_immutable_unless_forced(suite: Built, tmp_path: Path) -> None:
    out, cache = tmp_path / "dist", tmp_path / "cache"
    shutil.copytree(suite.out, out)
    shutil.copytree(suite.cache, cache)
    manifest = suite.folder / "suite.yaml"
    changed = manifest.with_name("changed.yaml")
    # A tolerance change rebuilds nothing, but changes the release's runtime config.
    changed.write_text(manifest.read_text().replace("    quantization: 8da8w\n",
                                                    "    quantization: 8da8w\n    verify: {min_cosine: 0.995}\n"))
    result, _ = build_json(changed, out, cache, "--target", "arduino_q")
    assert result.code == 2
    assert result.err.splitlines()[0].endswith(
        "error: version: release suite 1.0.0 for arduino_q already exists in "
        f"{out}/suite/1.0.0 with different content (runtime.bin, runtime.json)")
    assert verify_bundle(out / "suite" / "1.0.0" / "arduino_q") == []
    assert compare_trees(out / "suite" / "1.0.0" / "arduino_q", suite.bundle("arduino_q")) == []
    result, report = build_json(changed, out, cache, "--target", "arduino_q", "--force")
    assert result.code == 0
    assert {u["status"] for u in report["units"]} == {"cached"}
    config = json.loads((out / "suite" / "1.0.0" / "arduino_q" / "runtime.json").read_text())
    assert next(p for p in config["programs"] if p["name"] == "mlp_8da8w")["verification"]["tolerance_min_cosine"] \
        == 0.995


def test_two_clean_builds_are_byte_identical_with_any_worker_count(suite: Built, tmp_path: Path) -> None:
    result, _ = build_json(suite.manifest, tmp_path / "dist", tmp_path / "cache", "--jobs", "1")
    assert result.code == 0, result.err[-2000:]
    assert compare_trees(suite.out, tmp_path / "dist") == []


POINTWISE = """\
apiVersion: deployc/v1
name: pointwise
version: 0.1.0
targets: [arduino_q]
models:
  pointwise:
    source: {factory: "models.testnets:pointwise_convs"}
    inputs:
      x: {shape: [1, 3, 28, 28], range: [-1, 1]}
    quantization: w8a8
    verify: {inputs: 1}
"""


# Run in a fresh interpreter per thread count, as a build worker is: in the suite's own process, libraries that
# earlier tests loaded can leave torch's thread setting without effect (its conv sums then agree whatever it is
# told), and the premise below would not hold there.
_AT_THREADS = """
import sys
from pathlib import Path

import torch

manifest, cache, threads = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
torch.set_num_threads(threads)
sys.path.insert(0, str(manifest.parent))
if cache == "-":  # the premise: the model's float outputs at this thread count
    from models import testnets
    torch.manual_seed(0)
    with torch.no_grad():
        print(testnets.pointwise_convs()(torch.rand(1, 3, 28, 28) * 2 - 1).numpy().tobytes().hex())
    raise SystemExit
from deployc.build import program_job
from deployc.build.results import WorkerJob
from deployc.load.project import load_project
from deployc.plan.planner import make_plan
from deployc.plan.toolchain import detect

[unit] = make_plan(load_project(manifest), detect()).units()
result = program_job.build_program(WorkerJob(unit=unit, cache=cache, folder=str(manifest.parent), log_dir=None))
assert result.status == "built", result.error
assert torch.get_num_threads() == threads, "the build gives the caller's thread count back"
print(unit.program_key)
"""


def test_a_calibrated_program_is_the_same_bytes_whatever_torch_s_thread_count(tmp_path: Path) -> None:
    """A worker's torch had cores // jobs threads: the calibration ranges, and so a static program's bytes,
    depended on the machine and on --jobs. The build pins one thread (and gives the caller's back)."""
    from deployc.core.self_test_vectors import SELF_TEST_FILE

    manifest = make_project(tmp_path / "project", POINTWISE, "pointwise.yaml")

    def at(threads: int, cache: str) -> str:
        proc = subprocess.run([sys.executable, "-c", _AT_THREADS, str(manifest), cache, str(threads)],
                              capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr[-2000:]
        return proc.stdout.strip().splitlines()[-1]

    assert at(1, "-") != at(2, "-")  # the premise: the thread count changes the float values themselves
    built = []
    for threads in (2, 1):
        cache = tmp_path / f"cache-{threads}"
        key = at(threads, str(cache))
        entry, _ = Cache(cache).get(key)
        assert entry is not None
        built.append([entry.file(name).read_bytes() for name in ("program.pte", SELF_TEST_FILE)])
    assert built[0] == built[1]




@pytest.fixture(scope="module")
def tiny_reference(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    folder = tmp_path_factory.mktemp("tiny")
    manifest = make_project(folder / "project", TINY, "tiny.yaml")
    result, _ = build_json(manifest, folder / "dist", folder / "cache", "--check-reproducible")
    assert result.code == 0, result.err[-2000:]
    return manifest, folder / "dist", folder / "cache"


@pytest.mark.full  # a second whole build; byte-identity: the worker-count test
def test_check_reproducible(tiny_reference: tuple[Path, Path, Path]) -> None:
    manifest, dist, cache = tiny_reference
    result, report = build_json(manifest, dist, cache, "--check-reproducible")
    assert result.code == 0 and report["reproducible"] is True and report["differences"] == []


# A worker's death (export, cache-write: ~35 s each) in make test-all; the packaging kills in make test.
@pytest.mark.parametrize("point", [pytest.param("export", marks=pytest.mark.full),
                                   pytest.param("cache-write", marks=pytest.mark.full),
                                   "package-staged", "package-archived"])
def test_killed_build_leaves_nothing_that_looks_complete(point: str, tiny_reference: tuple[Path, Path, Path],
                                                         tmp_path: Path) -> None:
    manifest, reference, reference_cache = tiny_reference
    out, cache = tmp_path / "dist", tmp_path / "cache"
    if point.startswith("package"):
        shutil.copytree(reference_cache, cache)  # programs cached: the kill lands in packaging
    env = {**os.environ, "DEPLOYC_FAULT": point}
    proc = subprocess.run([sys.executable, "-m", "deployc", "build", str(manifest), "--out", str(out), "--cache-dir",
                           str(cache)], cwd=manifest.parent, env=env, capture_output=True, start_new_session=True,
                          timeout=600)
    assert proc.returncode == -signal.SIGKILL
    bundle = out / "tiny" / "0.1.0" / "arduino_q"
    assert not bundle.exists() or verify_bundle(bundle) == []
    for entry in (cache / "programs").glob("*/*/entry.json"):  # whatever reached the cache is complete
        assert Cache(cache).get(entry.parent.name)[0] is not None
    result, _ = build_json(manifest, out, cache)
    assert result.code == 0, result.err[-2000:]
    assert compare_trees(reference, out) == []
