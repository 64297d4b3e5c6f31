from __future__ import annotations

import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from deployc.cli import main

REPO = Path(__file__).resolve().parent.parent


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
    proc = subprocess.run([sys.executable, "-m", "deployc", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout)
    return Result(proc.returncode, proc.stdout, proc.stderr)
