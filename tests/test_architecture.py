"""The shape of the package (docs/architecture.md): imports point down the stages only, validate and
plan never load the torch side, and everything a backend needs is in its own module."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from deployc.targets.backends import BACKEND_FILES, BACKENDS

PACKAGE = Path(__file__).resolve().parent.parent / "deployc"

# In the order data flows. A module may import modules of its own stage or of earlier ones.
STAGES: list[tuple[str, tuple[str, ...]]] = [
    ("base", ("deployc", "deployc.errors", "deployc.fingerprint", "deployc.sizes", "deployc.faults",
              "deployc.yaml_io", "deployc.schema_base", "deployc.schema_errors", "deployc.quantization",
              "deployc.layout", "deployc.events", "deployc.captured", "deployc.pte", "deployc.console",
              "deployc.cache_paths", "deployc.hashes", "deployc.self_test", "deployc.tflite")),
    ("load", ("deployc.manifest", "deployc.pipeline", "deployc.targets", "deployc.sources", "deployc.project",
              "deployc.schemas", "deployc.huggingface", "deployc.starter")),
    ("resolve", ("deployc.resolve",)),
    ("plan", ("deployc.toolchain", "deployc.plan", "deployc.planner", "deployc.release")),
    ("build", ("deployc.cache", "deployc.shared_store", "deployc.facts", "deployc.results", "deployc.executors",
               "deployc.graph", "deployc.build")),
    ("package", ("deployc.packaging",)),
    ("apply", ("deployc.apply", "deployc.reproducibility")),
    ("run", ("deployc.runtime", "deployc.native_build")),
    ("cli", ("deployc.cli", "deployc.views", "deployc.__main__")),
]


def _stage(module: str) -> int:
    best, rank = -1, -1
    for i, (_, prefixes) in enumerate(STAGES):
        for p in prefixes:
            if (module == p or module.startswith(p + ".")) and len(p) > best:
                best, rank = len(p), i
    assert rank >= 0, f"{module} is in no stage: add it to STAGES and docs/architecture.md"
    return rank


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> set[str]:
    """Every deployc module `path` imports, at the top or inside functions (TYPE_CHECKING excepted)."""
    tree = ast.parse(path.read_text())
    typing_only = {id(n) for node in ast.walk(tree) if isinstance(node, ast.If)
                   and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING"
                   for child in node.body for n in ast.walk(child)}
    found = set()
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.split(".")[0] == "deployc")
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "deployc":
            found.add(node.module)
    return found


MODULES = sorted(p for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts)


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_imports_point_down_the_stages(path: Path) -> None:
    me = _module_name(path)
    mine = _stage(me)
    upward = sorted(m for m in _imports(path) if _stage(m) > mine)
    assert not upward, f"{me} ({STAGES[mine][0]}) imports later stages: " + ", ".join(
        f"{m} ({STAGES[_stage(m)][0]})" for m in upward)


def test_validate_and_plan_load_nothing_of_the_torch_side(tmp_path: Path) -> None:
    code = ("import sys; from deployc.cli import main;"
            "main(['validate', sys.argv[1]]); main(['plan', '--json', sys.argv[1]]);"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'executorch', 'torchao', 'numpy', 'ray')"
            " or m.startswith(('deployc.graph', 'deployc.executors', 'deployc.packaging', 'deployc.runtime'))))")
    manifest = PACKAGE.parent / "manifests" / "rag_offline.yaml"
    proc = subprocess.run([sys.executable, "-c", code, str(manifest)], capture_output=True, text=True, timeout=60,
                          cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == "[]"


@pytest.mark.parametrize("name", sorted(BACKENDS))
def test_a_backend_is_one_module(name: str) -> None:
    """Its executorch package is imported by its own module and nowhere else in deployc."""
    own = BACKEND_FILES[name].resolve()
    package = {"xnnpack": "executorch.backends.xnnpack", "vulkan": "executorch.backends.vulkan",
               "cortex_m": "executorch.backends.cortex_m", "qnn": "executorch.backends.qualcomm"}.get(name)
    if package is None:
        return
    users = [p for p in MODULES if package in p.read_text()]
    assert [p.resolve() for p in users] in ([own], []), f"{package} is named outside {own.name}: {users}"
