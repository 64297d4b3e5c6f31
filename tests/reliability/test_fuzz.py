"""Property-based fuzzing of manifests and profiles (hypothesis).

Generated valid documents validate; mutated ones (deleted keys, wrong types, random strings and
numbers, deep nesting, unicode, huge numbers, raw text damage) are either still valid or give located
UserErrors: never another exception, never a hang. DEPLOYC_FUZZ_EXAMPLES sets examples per property
(default 500: 2,000 in all, about a minute; a nightly run can use 20000).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from deployc.core.errors import UserError
from deployc.core.quantization import SCHEMES
from deployc.load.project import load_project
from deployc.targets.backends import BACKENDS
from deployc.targets.profile import load_profile

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = int(os.environ.get("DEPLOYC_FUZZ_EXAMPLES", "500"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))



@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A project folder the fuzzed documents are written into: the built-in profiles and the example models."""
    folder = tmp_path_factory.mktemp("fuzz")
    shutil.copytree(REPO / "targets", folder / "targets")
    shutil.copytree(REPO / "manifests" / "models", folder / "models", ignore=shutil.ignore_patterns("__pycache__"))
    return folder

ident = st.from_regex(r"[a-z][a-z0-9_]{0,7}", fullmatch=True)
dtypes = st.sampled_from(["float32", "float16", "int64", "int32", "int8", "uint8", "bool"])


@st.composite
def models(draw: Any) -> dict[str, Any]:
    dim_names = draw(st.lists(ident, max_size=2, unique=True))
    dims = {}
    for d in dim_names:
        lo = draw(st.integers(1, 64))
        dims[d] = {"min": lo, "max": lo + draw(st.integers(0, 64))}
    input_names = draw(st.lists(ident, min_size=1, max_size=3, unique=True))
    inputs = {}
    for i, name in enumerate(input_names):
        shape: list[Any] = draw(st.lists(st.integers(1, 16), min_size=1, max_size=3))
        if i == 0:
            shape = [*dim_names, *shape]  # every declared dim is used
        inputs[name] = {"shape": shape, "dtype": draw(dtypes)}
    model: dict[str, Any] = {"source": {"factory": "models.small:mlp"}, "inputs": inputs}
    if dims:
        model["dims"] = dims
    scheme = draw(st.sampled_from(sorted(SCHEMES)))
    model["quantization"] = {"scheme": scheme, **({"group_size": draw(st.sampled_from([16, 32, 64]))}
                                                  if SCHEMES[scheme].grouped else {})}
    return model


@st.composite
def manifests(draw: Any) -> dict[str, Any]:
    return {
        "apiVersion": "deployc/v1",
        "name": draw(st.from_regex(r"[a-z0-9]{1,6}(-[a-z0-9]{1,4}){0,2}", fullmatch=True)),
        "version": f"{draw(st.integers(0, 99))}.{draw(st.integers(0, 99))}.{draw(st.integers(0, 99))}",
        "targets": draw(st.lists(st.sampled_from(["snapdragon", "arduino_q"]), min_size=1, unique=True)),
        "models": draw(st.dictionaries(ident, models(), min_size=1, max_size=3)),
    }


@st.composite
def profiles(draw: Any) -> dict[str, Any]:
    units = []
    for i, backend in enumerate(draw(st.lists(st.sampled_from(sorted(BACKENDS)), min_size=1, max_size=3))):
        schemes = draw(st.lists(st.sampled_from(sorted(BACKENDS[backend].schemes)), min_size=1, unique=True))
        unit: dict[str, Any] = {"name": f"u{i}", "backend": backend, "quantization": schemes}
        if draw(st.booleans()):
            unit["budgets"] = {"flash": f"{draw(st.integers(1, 4096))}KiB", "sram": draw(st.integers(0, 10**9))}
        units.append(unit)
    return {"apiVersion": "deployc/v1", "name": "fuzzed", "device": {"soc": "X", "os": "linux", "abi": "arm64"},
            "units": units, "budgets": {"ram": f"{draw(st.integers(1, 64))}GiB"},
            "fallback": draw(st.sampled_from(["next", "error"]))}


junk = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-10**40, max_value=10**40),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=40),
    st.lists(st.integers(), max_size=3), st.dictionaries(st.text(max_size=6), st.integers(), max_size=3),
)


def _paths(node: Any, at: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [at] if at else []
    if isinstance(node, dict):
        for k, v in node.items():
            out += _paths(v, (*at, k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            out += _paths(v, (*at, i))
    return out


@st.composite
def mutated(draw: Any, documents: Any) -> str:
    doc = draw(documents)
    paths = _paths(doc)
    path = draw(st.sampled_from(paths))
    parent = doc
    for part in path[:-1]:
        parent = parent[part]
    last = path[-1]
    action = draw(st.sampled_from(["delete", "replace", "nest", "rename", "text"]))
    if action == "delete":
        del parent[last]
    elif action == "replace":
        parent[last] = draw(junk)
    elif action == "nest":
        value: Any = draw(junk)
        for _ in range(draw(st.integers(1, 120))):
            value = [value]
        parent[last] = value
    elif action == "rename" and isinstance(parent, dict):
        parent[draw(st.text(min_size=1, max_size=12))] = parent.pop(last)
    text = yaml.safe_dump(doc, allow_unicode=True, sort_keys=False)
    if action == "text":
        at = draw(st.integers(0, len(text)))
        text = text[:at] + draw(st.text(max_size=8)) + text[at:]
    return text


def _check(path: Path, loader: Any) -> None:
    try:
        loader(path)
    except UserError as exc:
        assert exc.diagnostics, "a UserError must carry at least one diagnostic"
        for d in exc.diagnostics:
            assert d.location.path and d.message
            assert d.location.line >= 1 or d.location.path != str(path), d


def _manifest(path: Path) -> None:
    load_project(path, env={})


def _profile(path: Path) -> None:
    load_profile(path.name, path.parent, [path.parent])


@FUZZ
@given(manifests())
def test_generated_manifests_validate(work: Path, doc: dict[str, Any]) -> None:
    path = work / "valid.yaml"
    path.write_text(yaml.safe_dump(doc))
    load_project(path, env={})


@FUZZ
@given(mutated(manifests()))
def test_mutated_manifests_fail_cleanly(work: Path, text: str) -> None:
    path = work / "mutated.yaml"
    path.write_text(text, encoding="utf-8", errors="surrogatepass")
    _check(path, _manifest)


@FUZZ
@given(profiles())
def test_generated_profiles_validate(work: Path, doc: dict[str, Any]) -> None:
    (work / "profiles").mkdir(exist_ok=True)
    path = work / "profiles" / "fuzzed.yaml"
    path.write_text(yaml.safe_dump(doc))
    load_profile("fuzzed", work, [work / "profiles"])


@FUZZ
@given(mutated(profiles()))
def test_mutated_profiles_fail_cleanly(work: Path, text: str) -> None:
    (work / "profiles").mkdir(exist_ok=True)
    path = work / "profiles" / "fuzzed.yaml"
    path.write_text(text, encoding="utf-8", errors="surrogatepass")
    _check(path, _profile)
