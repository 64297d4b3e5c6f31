from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import pytest

from deployc.cli.app import main
from deployc.targets.native_build import JavaApi

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the helpers package

from helpers.projects import (
    CHOOSE,
    REPO,
    Built,
    Result,
    build_json,
    build_project,
    make_project,
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test of the RAG example's bundle runs in `make test-all` only: building it (MiniLM and the
    decoder for both targets, the NPU's index on the HTP emulator) takes most of ten minutes; `make demo`
    builds and answers from it, and the suite's own bundles cover each backend, op and program form."""
    for item in items:
        if "rag" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.full)


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


@pytest.fixture(scope="session", autouse=True)
def _library_loggers() -> None:
    """transformers binds its log handler to sys.stderr when a module of it first logs. Bound inside a test
    that captures stderr (the `cli` fixture), it would write to that test's stream after it is closed: bind it
    now, to the session's."""
    from transformers.utils import logging as hf_logging

    hf_logging.get_logger("transformers")


@pytest.fixture(autouse=True)
def _own_cache(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every test its own cache directory (and user cache home, where shared caches keep their mirror)."""
    home = tmp_path_factory.mktemp("cache")
    monkeypatch.setenv("XDG_CACHE_HOME", str(home))
    monkeypatch.setenv("DEPLOYC_CACHE_DIR", str(home / "deployc"))


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


@pytest.fixture(scope="session")
def suite(tmp_path_factory: pytest.TempPathFactory) -> Built:
    """The shared build: every backend path that builds here, real export/lower/verify. Built once."""
    from helpers.suites import SUITE, write_calibration

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
    (folder / "build.json").write_text(json.dumps(report))  # the build's report
    return folder / "dist" / "rag-offline" / "1.0.0"


@pytest.fixture(scope="session")
def npu(tmp_path_factory: pytest.TempPathFactory) -> Built:
    """The QNN suite (tests/helpers/suites.py), built once: needs QNN's host libraries, which `make test` installs."""
    from helpers.suites import QNN_SUITE

    from deployc.targets.backends.qnn import host as qnn_host

    found = qnn_host.find(os.environ)
    if isinstance(found, str):
        pytest.fail(f"QNN host libraries missing ({found}); `make test` installs them")
    return build_project(tmp_path_factory.mktemp("npu"), QNN_SUITE, "npu.yaml", "--jobs", "2")


@pytest.fixture(scope="session")
def java_api(tmp_path_factory: pytest.TempPathFactory) -> JavaApi:
    """The native reference runner with the Java API beside it (`deployc native build --jni`): one build of
    the C++ sources per session."""
    from deployc.targets.native_build import build_java_api

    return build_java_api(tmp_path_factory.mktemp("native") / "build", lambda _: None)


@pytest.fixture(scope="session")
def runner(java_api: JavaApi) -> Path:
    """The native reference runner (`deployc native build`)."""
    return java_api.library.parent / "deployc-runner"


@pytest.fixture(scope="session")
def chosen(tmp_path_factory: pytest.TempPathFactory) -> Built:
    """Two models choosing their scheme by measurement (by size, by latency), with the HTML report."""
    folder = tmp_path_factory.mktemp("choose")
    return build_project(folder, CHOOSE, "suite.yaml", "--no-emulate", "--report", str(folder / "report.html"))
