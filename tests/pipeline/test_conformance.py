"""Both runtimes against one truth: every conformance vector (tests/conformance/<op>/*.vector.json: inputs,
parameters, the outputs an independent reference computed) through deployc's Python op and through the
native runner's op table (`deployc-runner --op`). Ops that call a program (model, generate) are held to
each other by tests/runtime/test_native.py on built bundles instead: a vector cannot carry a program."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from deployc.core.errors import RunError
from deployc.pipeline.host.bundle_files import BundleFiles
from deployc.pipeline.ops import OPS

HERE = Path(__file__).resolve().parents[1] / "conformance"
VECTORS = sorted(HERE.glob("*/*.vector.json"), key=lambda p: (p.parent.name, p.name))
PROGRAM_OPS = {"model", "generate"}


class VectorHost(BundleFiles):
    """A vector's folder as the Host its op runs with: files beside it, no programs."""

    def signature(self, program: str, method: str) -> dict[str, Any]:
        raise RunError("a conformance vector has no programs")

    def call(self, program: str, tensors: list[Any], method: str = "forward") -> list[Any]:
        raise RunError("a conformance vector has no programs")

    def note(self, figures: dict[str, Any]) -> None:
        pass


def _input(value: Any, folder: Path) -> Any:
    if isinstance(value, str):
        return value
    if "file" in value:
        return (folder / value["file"]).read_bytes()
    if "chunks" in value:
        return value["chunks"]
    return np.asarray(value["data"], dtype=value["dtype"]).reshape(value["shape"])


def _as_json(value: Any) -> Any:
    """An output as the native runner prints it."""
    if isinstance(value, np.ndarray):
        return {"dtype": str(value.dtype), "shape": list(value.shape), "data": value.reshape(-1).tolist()}
    if isinstance(value, list):
        return value
    return value


def _check(outputs: dict[str, Any], vector: dict[str, Any], who: str) -> None:
    expected, atol = vector["expected"], vector["atol"]
    assert sorted(outputs) == sorted(expected), f"{who}: outputs {sorted(outputs)}"
    for port, want in expected.items():
        got = outputs[port]
        if isinstance(want, str):
            assert got == want, f"{who}: {port}"
        elif "chunks" in want:
            assert [{k: c[k] for k in ("id", "source", "text")} for c in got] == \
                   [{k: c[k] for k in ("id", "source", "text")} for c in want["chunks"]], f"{who}: {port}"
            assert np.allclose([c["score"] for c in got], [c["score"] for c in want["chunks"]], atol=atol, rtol=0)
        else:
            assert got["dtype"] == want["dtype"] and got["shape"] == want["shape"], f"{who}: {port} {got['shape']}"
            diff = np.abs(np.asarray(got["data"], dtype=np.float64) - np.asarray(want["data"], dtype=np.float64))
            assert diff.max(initial=0.0) <= atol, f"{who}: {port} differs by {diff.max()} (> {atol})"


def test_every_op_without_a_program_has_vectors() -> None:
    assert {p.parent.name for p in VECTORS} == set(OPS) - PROGRAM_OPS


@pytest.mark.parametrize("path", VECTORS, ids=lambda p: f"{p.parent.name}/{p.name.removesuffix('.vector.json')}")
def test_python_op_gives_the_vector_outputs(path: Path) -> None:
    vector = json.loads(path.read_text())
    stage = {"name": "conformance", "op": vector["op"], "program": "", "method": ""}
    args = {port: _input(v, path.parent) for port, v in vector["inputs"].items()}
    outputs = OPS[vector["op"]].run(stage, args, vector["params"], VectorHost(path.parent))
    _check({k: _as_json(v) for k, v in outputs.items()}, vector, "python")


@pytest.mark.parametrize("path", VECTORS, ids=lambda p: f"{p.parent.name}/{p.name.removesuffix('.vector.json')}")
def test_native_op_gives_the_vector_outputs(path: Path, runner: Path) -> None:
    vector = json.loads(path.read_text())
    proc = subprocess.run([str(runner), "--op", str(path)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    _check(json.loads(proc.stdout)["outputs"], vector, "native")
