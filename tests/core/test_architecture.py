"""The shape of the package (docs/architecture.md): imports point down the stages only, validate and
plan never load the torch side, and everything a backend needs is in its own module."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

from deployc.targets.backends import BACKENDS, backend_files

PACKAGE = Path(__file__).resolve().parents[2] / "deployc"

# In the order data flows: each stage package, and resolve inside plan's. A module may import modules of its
# own stage or of earlier ones, at the top, inside a function or under TYPE_CHECKING alike.
STAGES: list[tuple[str, tuple[str, ...]]] = [
    ("core", ("deployc", "deployc.core")),
    ("targets", ("deployc.targets",)),
    ("pipeline", ("deployc.pipeline",)),
    ("load", ("deployc.load",)),
    ("resolve", ("deployc.plan.resolve",)),
    ("plan", ("deployc.plan",)),
    ("graph", ("deployc.graph",)),
    ("build", ("deployc.build",)),
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


def _imports(path: Path, spawned: bool = True) -> set[str]:
    """Every deployc module `path` imports, at the top, inside functions or under TYPE_CHECKING, and (spawned)
    every one it starts as a process (`python -m MODULE`: spawning a module is depending on it). `from PACKAGE
    import MODULE` depends on MODULE; `from MODULE import NAME` on MODULE."""
    tree = ast.parse(path.read_text())
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.split(".")[0] == "deployc")
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "deployc":
            submodules = {f"{node.module}.{a.name}" for a in node.names} & {m for m in _ALL if _is_module(m)}
            found.update(submodules or {node.module})
            if len(submodules) < len(node.names):
                found.add(node.module)  # names defined by the module itself
    if spawned:
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
_ALL = {_module_name(p) for p in MODULES}


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_imports_point_down_the_stages(path: Path) -> None:
    me = _module_name(path)
    mine = _stage(me)
    upward = sorted(m for m in _imports(path) if _stage(m) > mine)
    assert not upward, f"{me} ({STAGES[mine][0]}) imports later stages: " + ", ".join(
        f"{m} ({STAGES[_stage(m)][0]})" for m in upward)


def _graph() -> dict[str, set[str]]:
    """Module -> the modules it imports. A process it starts shares no module with it, so spawning is left
    out here (`--check-reproducible` runs the CLI again) while the stage order above counts it."""
    return {_module_name(p): _imports(p, spawned=False) - {_module_name(p)} for p in MODULES}


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def test_no_module_imports_another_that_imports_it_back() -> None:
    assert _cycles(_graph()) == []


def test_no_two_stage_packages_import_each_other() -> None:
    def package(module: str) -> str:
        return ".".join(module.split(".")[:2])

    edges: dict[str, set[str]] = {}
    for module, imported in _graph().items():
        edges.setdefault(package(module), set()).update(package(m) for m in imported if package(m) != package(module))
    assert _cycles(edges) == []


def _stage_table() -> dict[str, str]:
    """docs/architecture.md's stage table: stage name -> its row."""
    text = (PACKAGE.parent / "docs" / "architecture.md").read_text()
    rows = [line for line in text.splitlines() if line.startswith("| ") and not line.startswith("| stage")]
    return {row.split("|")[1].strip(): row for row in rows if row.split("|")[1].strip() in dict(STAGES)}


def test_the_architecture_doc_lists_every_module_in_its_stage() -> None:
    """Each module is named in its stage's row (`name`, or `sub/name` inside a subpackage), so the table a
    contributor reads is the package as it is."""
    table = _stage_table()
    assert set(table) == set(dict(STAGES)), f"stages missing from the table: {set(dict(STAGES)) - set(table)}"
    missing = []
    for path in MODULES:
        module = _module_name(path)
        if path.name == "__init__.py" and module in {p for _, ps in STAGES for p in ps}:
            continue  # a stage package itself
        stage = STAGES[_stage(module)][0]
        prefix = max((p for p in dict(STAGES)[stage] if module == p or module.startswith(p + ".")), key=len)
        name = module[len(prefix) + 1:].replace(".", "/") if module != prefix else module.split(".")[-1]
        if f"`{name}`" not in table[stage]:
            missing.append(f"{module} (as `{name}` in the {stage} row)")
    assert missing == []


@pytest.mark.parametrize("stage", [p for _, ps in STAGES for p in ps if p.count(".") == 1 and "__" not in p])
def test_each_stage_package_says_what_it_takes_and_gives(stage: str) -> None:
    init = PACKAGE.parent / Path(*stage.split(".")) / "__init__.py"
    doc = ast.get_docstring(ast.parse(init.read_text())) or ""
    assert "takes" in doc.lower() and "gives" in doc.lower() and len(doc.splitlines()) <= 3, f"{init}: {doc!r}"


def test_validate_and_plan_load_nothing_of_the_torch_side(tmp_path: Path) -> None:
    """The main example names a GGUF file: the first validate with a cache (its own here) makes the file's view
    once (transformers' converter writes its tokenizer.json: transformers and numpy, never torch); every later
    validate and plan read the header with struct alone."""
    code = ("import sys; from deployc.cli.app import main;"
            "main(['validate', sys.argv[1]]); main(['plan', '--json', sys.argv[1]]);"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'executorch', 'torchao', 'numpy', 'ray',"
            " 'flatbuffers')"
            " or m.startswith(('deployc.graph', 'deployc.build.executors', 'deployc.packaging', 'deployc.runtime'))))")
    manifest = PACKAGE.parent / "manifests" / "rag_offline.yaml"
    env = {**os.environ, "DEPLOYC_CACHE_DIR": str(tmp_path / "cache")}
    runs = [subprocess.run([sys.executable, "-c", code, str(manifest)], capture_output=True, text=True, timeout=60,
                           cwd=tmp_path, env=env) for _ in range(2)]
    assert all(p.returncode == 0 for p in runs), runs[0].stderr + runs[1].stderr
    cold, warm = (ast.literal_eval(p.stdout.strip().splitlines()[-1]) for p in runs)
    assert not [m for m in cold if m.split(".")[0] != "numpy"]
    assert warm == []


# Packages every backend's lowering goes through (deployc.graph uses them), and host runtimes of a
# backend's programs that deployc's runtime modules load (as executorch.runtime is for .pte programs).
SHARED = {"executorch.exir"}
RUNTIMES = {"ai_edge_litert": {"graph/litert_runtime.py", "core/tflite.py"}}


@pytest.mark.parametrize("name", sorted(BACKENDS))
def test_a_backend_is_one_module(name: str) -> None:
    """The packages of its ahead-of-time path (`modules`) are named by its own files only (its module and the
    helpers beside it, or its package); a backend with no package of its own is ExecuTorch's core alone: no
    partitioner, no delegate."""
    backend = BACKENDS[name]
    own = [m for m in backend.modules if m not in SHARED]
    if not own:
        assert not backend.partitioners and backend.delegate_id == "", f"{name} names no package of its own"
        return
    files = set(backend_files(name))
    for package in own:
        allowed = files | {PACKAGE / f for f in RUNTIMES.get(package, ())}
        users = {p.resolve() for p in MODULES if package in p.read_text()}
        assert users <= allowed and users & files, f"{package} is named outside {name}'s files: {users - allowed}"


def test_every_folder_of_the_package_is_a_regular_package() -> None:
    """A folder without __init__.py still imports (a namespace package) from a checkout, but a wheel leaves
    it out: `build/` in .gitignore once kept deployc/build/__init__.py out of git that way."""
    folders = {p.parent for p in MODULES}
    assert sorted(str(f.relative_to(PACKAGE.parent)) for f in folders if not (f / "__init__.py").is_file()) == []
