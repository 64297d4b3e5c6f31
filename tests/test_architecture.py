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
    ("core", ("deployc", "deployc.core")),
    ("load", ("deployc.load", "deployc.pipeline", "deployc.targets")),
    ("resolve", ("deployc.plan.resolve",)),
    ("plan", ("deployc.plan",)),
    ("build", ("deployc.build", "deployc.graph")),
    ("package", ("deployc.packaging",)),
    ("apply", ("deployc.apply",)),
    ("run", ("deployc.runtime",)),
    ("cli", ("deployc.cli", "deployc.__main__")),
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
    """Every deployc module `path` imports, at the top or inside functions (TYPE_CHECKING excepted), and
    every one it starts as a process (`python -m MODULE`: spawning a module is depending on it)."""
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
            found.update(f"{node.module}.{a.name}" for a in node.names)  # a module imported from its package
    found.update(_spawned(tree, path))
    return {m for m in found if _is_module(m)}


def _is_module(name: str) -> bool:
    rel = Path(*name.split("."))
    return (PACKAGE.parent / rel).with_suffix(".py").is_file() or (PACKAGE.parent / rel / "__init__.py").is_file()


def _spawned(tree: ast.AST, path: Path) -> set[str]:
    """Modules started as `[sys.executable, "-m", X.__name__]`. A module named by a string instead would hide
    the dependency from this test: refused."""
    aliases: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            aliases.update({a.asname or a.name: f"{node.module}.{a.name}" for a in node.names})
        elif isinstance(node, ast.Import):
            aliases.update({a.asname or a.name: a.name for a in node.names if not a.asname and "." not in a.name})
    found = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.List):
            continue
        items = node.elts
        for i, item in enumerate(items[:-1]):
            if not (isinstance(item, ast.Constant) and item.value == "-m"):
                continue
            target = items[i + 1]
            if isinstance(target, ast.Constant) and str(target.value).startswith("deployc"):
                pytest.fail(f"{path.name}: spawns {target.value!r} by name; import it and pass its __name__")
            if (isinstance(target, ast.Attribute) and target.attr == "__name__"
                    and isinstance(target.value, ast.Name) and target.value.id in aliases):
                module = aliases[target.value.id]
                found.add(f"{module}.__main__" if module == "deployc" else module)
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
    code = ("import sys; from deployc.cli.app import main;"
            "main(['validate', sys.argv[1]]); main(['plan', '--json', sys.argv[1]]);"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'executorch', 'torchao', 'numpy', 'ray',"
            " 'flatbuffers')"
            " or m.startswith(('deployc.graph', 'deployc.build.executors', 'deployc.packaging', 'deployc.runtime'))))")
    manifest = PACKAGE.parent / "manifests" / "rag_offline.yaml"
    proc = subprocess.run([sys.executable, "-c", code, str(manifest)], capture_output=True, text=True, timeout=60,
                          cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == "[]"


# Packages every backend's lowering goes through (deployc.graph uses them), and host runtimes of a
# backend's programs that deployc's runtime modules load (as executorch.runtime is for .pte programs).
SHARED = {"executorch.exir"}
RUNTIMES = {"ai_edge_litert": {"graph/litert_runtime.py", "core/tflite.py"}}


@pytest.mark.parametrize("name", sorted(BACKENDS))
def test_a_backend_is_one_module(name: str) -> None:
    """The packages of its ahead-of-time path (`modules`) are named by its own module and its helpers only; a
    backend with no package of its own is ExecuTorch's core alone: no partitioner, no delegate."""
    backend = BACKENDS[name]
    own_file = BACKEND_FILES[name].resolve()
    own = [m for m in backend.modules if m not in SHARED]
    if not own:
        assert not backend.partitioners and backend.delegate_id == "", f"{name} names no package of its own"
        return
    helpers = {own_file, *(own_file.parent / h for h in backend.helpers)}
    for package in own:
        allowed = helpers | {PACKAGE / f for f in RUNTIMES.get(package, ())}
        users = {p.resolve() for p in MODULES if package in p.read_text()}
        assert users <= allowed and own_file in users, f"{package} is named outside {own_file.name}: {users - allowed}"


def test_every_folder_of_the_package_is_a_regular_package() -> None:
    """A folder without __init__.py still imports (a namespace package) from a checkout, but a wheel leaves
    it out: `build/` in .gitignore once kept deployc/build/__init__.py out of git that way."""
    folders = {p.parent for p in MODULES}
    assert sorted(str(f.relative_to(PACKAGE.parent)) for f in folders if not (f / "__init__.py").is_file()) == []
