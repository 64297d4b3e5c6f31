"""Projects and builds as a user makes them: a folder with the shipped profiles and example model code, a
manifest, and `deployc` run in a process of its own."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TESTS = REPO / "tests"


@dataclass
class Result:
    code: int
    out: str
    err: str


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
        shutil.copyfile(TESTS / "helpers" / "testnets.py", folder / "models" / "testnets.py")
    path = folder / name
    path.write_text(manifest_text)
    return path


def build_json(manifest: Path, out: Path, cache: Path, *extra: str, timeout: float = 600,
               env: dict[str, str] | None = None) -> tuple[Result, dict]:
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
