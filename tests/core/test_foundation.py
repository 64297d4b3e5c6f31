"""Cross-cutting foundation checks: example manifests, schemas, vocabularies, speed, no torch."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import typing
from pathlib import Path

import pytest

from deployc.core.quantization import SCHEMES, SchemeName
from deployc.load.json_schemas import json_schemas
from deployc.targets.backends import BACKENDS, BackendName

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((REPO / "manifests").glob("*.yaml"))


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_example_manifests_validate(path: Path, cli) -> None:
    r = cli("validate", str(path))
    assert r.code == 0, r.err
    assert r.out.startswith(f"{path}: ok")


def test_shipped_json_schemas_are_current() -> None:
    for name, text in json_schemas().items():
        shipped = REPO / "schemas" / name
        assert shipped.read_text() == text, f"run `deployc schema` to refresh {shipped}"
    manifest_schema = json.loads(json_schemas()["manifest.schema.json"])
    assert "apiVersion" in manifest_schema["properties"]


def test_vocabularies_agree() -> None:
    assert set(typing.get_args(SchemeName)) == set(SCHEMES)
    assert set(typing.get_args(BackendName)) == set(BACKENDS)
    for b in BACKENDS.values():
        assert b.schemes <= set(SCHEMES)


def test_validate_imports_no_torch() -> None:
    """(How fast it is: benchmarks/cli_bench.py.)"""
    code = (
        "import sys;"
        "from deployc.cli.app import main; rc = main(['validate', *sys.argv[1:]]);"
        "print(rc, 'torch' in sys.modules, 'executorch' in sys.modules or 'ray' in sys.modules)"
    )
    proc = subprocess.run([sys.executable, "-c", code, *map(str, EXAMPLES)], capture_output=True, text=True,
                          cwd=REPO, timeout=60)
    rc, torch_loaded, et_loaded = proc.stdout.splitlines()[-1].split()
    assert (rc, torch_loaded, et_loaded) == ("0", "False", "False"), proc.stderr


def test_debug_shows_traceback_only_when_asked(project: Path) -> None:
    (project / "m.yaml").write_text("apiVersion: deployc/v1\n")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    quiet = subprocess.run([sys.executable, "-m", "deployc", "validate", "m.yaml"], capture_output=True,
                           text=True, cwd=project, env=env, timeout=60)
    assert quiet.returncode == 2 and "Traceback" not in quiet.stderr
    loud = subprocess.run([sys.executable, "-m", "deployc", "--debug", "validate", "m.yaml"], capture_output=True,
                          text=True, cwd=project, env=env, timeout=60)
    assert loud.returncode == 2 and "Traceback" in loud.stderr
