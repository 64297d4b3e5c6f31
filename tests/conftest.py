from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from deployc.cli.app import main

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))


@pytest.fixture(scope="session", autouse=True)
def _session_cache(tmp_path_factory: pytest.TempPathFactory):
    """Nothing a test runs writes into the user's cache: session fixtures' builds and their processes get a
    cache of the session's own (the per-test fixture below then gives each test its own). The toolchain
    folder stays the machine's: it holds what `make test` prepared (the arm64 runner, the aarch64 wheel),
    named by content and never changed in place, like pip's own cache."""
    from deployc.targets.arm64_runner import toolchains_dir

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("DEPLOYC_TOOLCHAINS", str(toolchains_dir()))
        home = tmp_path_factory.mktemp("xdg-cache")
        mp.setenv("XDG_CACHE_HOME", str(home))
        mp.setenv("DEPLOYC_CACHE_DIR", str(home / "deployc"))
        yield


@pytest.fixture(autouse=True)
def _own_cache(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every test its own cache directory (and user cache home, where shared caches keep their mirror)."""
    home = tmp_path_factory.mktemp("cache")
    monkeypatch.setenv("XDG_CACHE_HOME", str(home))
    monkeypatch.setenv("DEPLOYC_CACHE_DIR", str(home / "deployc"))


@dataclass
class Result:
    code: int
    out: str
    err: str


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str]):
    """Run the CLI in-process, as a user would type it."""

    def run(*args: str) -> Result:
        code = main(list(args))
        captured = capsys.readouterr()
        return Result(code, captured.out, captured.err)

    return run


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty project folder with the built-in profiles and example model code; cwd is inside it."""
    shutil.copytree(REPO / "targets", tmp_path / "targets")
    shutil.copytree(REPO / "manifests" / "models", tmp_path / "models",
                    ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("DEPLOYC_TARGETS_PATH", raising=False)
    monkeypatch.delenv("QNN_SDK_ROOT", raising=False)
    return tmp_path


def run_subprocess(*args: str, cwd: Path | None = None, env: dict[str, str] | None = None,
                   timeout: float = 600) -> Result:
    env = {**os.environ, **(env or {})}
    env.pop("QNN_SDK_ROOT", None)
    env.pop("DEPLOYC_TARGETS_PATH", None)
    proc = subprocess.run([sys.executable, "-m", "deployc", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout)
    return Result(proc.returncode, proc.stdout, proc.stderr)


@dataclass
class Built:
    folder: Path
    manifest: Path
    out: Path
    cache: Path
    report: dict
    result: Result

    def unit(self, model: str, target: str) -> dict:
        return next(u for u in self.report["units"] if u["model"] == model and u["target"] == target)

    def bundle(self, target: str) -> Path:
        return self.out / "suite" / "1.0.0" / target


def make_project(folder: Path, manifest_text: str, name: str = "suite.yaml") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    if not (folder / "targets").exists():
        shutil.copytree(REPO / "targets", folder / "targets")
        shutil.copytree(REPO / "manifests" / "models", folder / "models",
                        ignore=shutil.ignore_patterns("__pycache__"))
        shutil.copyfile(REPO / "tests" / "fixtures" / "testnets.py", folder / "models" / "testnets.py")
    path = folder / name
    path.write_text(manifest_text)
    return path


def build_json(manifest: Path, out: Path, cache: Path, *extra: str, timeout: float = 600,
               env: dict[str, str] | None = None) -> tuple[Result, dict]:
    import json

    r = run_subprocess("build", str(manifest), "--out", str(out), "--cache-dir", str(cache), "--json", *extra,
                       cwd=manifest.parent, timeout=timeout, env=env)
    return r, json.loads(r.out) if r.out.strip() else {}


def build_project(folder: Path, manifest_text: str, name: str, *extra: str, must_pass: bool = True) -> Built:
    """A project of this manifest in folder/project (targets and model code beside it), built with --json
    into folder/dist and folder/cache."""
    manifest = make_project(folder / "project", manifest_text, name)
    out, cache = folder / "dist", folder / "cache"
    result, report = build_json(manifest, out, cache, *extra)
    assert report and (result.code == 0 or not must_pass), result.err[-3000:]
    return Built(folder / "project", manifest, out, cache, report, result)


@pytest.fixture(scope="session")
def suite(tmp_path_factory: pytest.TempPathFactory) -> Built:
    """The shared build: every backend path that builds here, real export/lower/verify. Built once."""
    from build_suite import SUITE, write_calibration

    folder = tmp_path_factory.mktemp("suite")
    manifest = make_project(folder / "project", SUITE)
    write_calibration(manifest.parent)
    out, cache = folder / "dist", folder / "cache"
    result, report = build_json(manifest, out, cache, "--jobs", "2")
    assert result.code == 0, result.err[-3000:]
    return Built(folder / "project", manifest, out, cache, report, result)


@pytest.fixture(scope="session")
def rag(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("rag")
    project = folder / "project"
    shutil.copytree(REPO / "manifests", project, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(REPO / "targets", folder / "targets")
    # Cold, both targets: 3-6 min on 2 cores; a loaded machine took over 10 (2026-12-01).
    result, report = build_json(project / "rag_offline.yaml", folder / "dist", folder / "cache", timeout=1800)
    assert result.code == 0, result.err[-3000:]
    assert {u["status"] for u in report["units"]} == {"built"}
    (folder / "build.err").write_text(result.err)  # the progress lines, for tests of what the build says
    return folder / "dist" / "rag-offline" / "1.0.0"


@pytest.fixture(scope="session")
def npu(tmp_path_factory: pytest.TempPathFactory) -> Built:
    """The QNN suite (tests/build_suite.py), built once: needs QNN's host libraries, which `make test` installs."""
    from build_suite import QNN_SUITE

    from deployc.targets.backends.qnn import host as qnn_host

    found = qnn_host.find(os.environ)
    if isinstance(found, str):
        pytest.fail(f"QNN host libraries missing ({found}); `make test` installs them")
    return build_project(tmp_path_factory.mktemp("npu"), QNN_SUITE, "npu.yaml", "--jobs", "2")


@pytest.fixture(scope="session")
def runner(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The native reference runner (`deployc native build`), built once per session."""
    from deployc.targets.native_build import build_runner

    return build_runner(tmp_path_factory.mktemp("native") / "build", lambda _: None)


# The MLP's 8da4w program misses a 0.999 cosine (measured 0.989), its 8da8w one meets it (0.99994).
CHOOSE = """\
apiVersion: deployc/v1
name: suite
version: 1.0.0
targets: [arduino_q]
models:
  small:
    source: {factory: models.small:mlp, kwargs: {features: 64, hidden: 256, classes: 16}}
    inputs:
      x: {shape: [1, 64], dtype: float32, range: [-2.0, 2.0]}
    quantization: {choose: [8da4w, 8da8w, fp32]}
    verify: {min_cosine: 0.999}
    overrides:
      arduino_q: {unit: cpu}
  fast:
    source: {factory: models.small:mlp, kwargs: {features: 64, hidden: 256, classes: 16}}
    inputs:
      x: {shape: [1, 64], dtype: float32, range: [-2.0, 2.0]}
    quantization: {choose: [fp32, 8da8w], by: latency}
    overrides:
      arduino_q: {unit: cpu}
"""


@pytest.fixture(scope="session")
def chosen(tmp_path_factory: pytest.TempPathFactory) -> Built:
    """Two models choosing their scheme by measurement (by size, by latency), with the HTML report."""
    folder = tmp_path_factory.mktemp("choose")
    return build_project(folder, CHOOSE, "suite.yaml", "--no-emulate", "--report", str(folder / "report.html"))
