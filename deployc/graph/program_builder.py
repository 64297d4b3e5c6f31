"""Build one program of a plan, end to end, into the cache. Runs inside a worker process.

load -> example inputs + eager references -> quantize/export -> lower -> serialize -> verify (in a
child process) -> report. A program that builds is cached with its measurements, including a
verification that missed its tolerance (rebuilding would give the same bytes); a step that raises is
reported as failed and nothing is cached.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from deployc.cache import open_cache, unit_id
from deployc.errors import BuildError
from deployc.faults import fault_point
from deployc.plan import UnitPlan

REPORT_FILE = "report.json"
PROGRAM_FILE = "program.pte"
REPORT_SCHEMA_VERSION = 1
VERIFY_TIMEOUT_S = 900

Emit = Callable[[str, str], None]
_sink: Emit | None = None  # where step events go; set by the executor that hosts this process


def set_event_sink(sink: Emit | None) -> None:
    global _sink
    _sink = sink


def set_threads(threads: int) -> None:
    os.environ.setdefault("OMP_NUM_THREADS", str(threads))
    import torch

    torch.set_num_threads(threads)


def _emit(label: str, step: str) -> None:
    if _sink is not None:
        _sink(label, step)


def build_program(payload: dict[str, Any]) -> dict[str, Any]:
    """Worker entry point: a plain dict in, a plain dict out (both cross process boundaries)."""
    unit = UnitPlan.model_validate(payload["unit"])
    cache = open_cache(payload["cache"])
    key = unit.program_key
    label = unit.label
    with cache.lock(key):
        entry, warning = cache.get(key)  # re-check: another process may have built it meanwhile
        if entry is not None:
            return {"key": key, "status": "cached", "warning": warning}
        staging = cache.tmp_dir()
        step = "load"
        try:
            def emit(lbl: str, s: str) -> None:
                nonlocal step
                step = s
                _emit(lbl, s)

            report = _build(unit, Path(payload["manifest_dir"]), staging, lambda s: emit(label, s))
            (staging / REPORT_FILE).write_text(json.dumps(report, indent=2, sort_keys=True))
            fault_point("cache-write")
            cache.put(key, staging, unit_id(unit.model, unit.target, unit.unit))
        except BuildError as exc:
            shutil.rmtree(staging, ignore_errors=True)
            return {"key": key, "status": "failed", "step": step, "error": str(exc), "warning": warning}
        except Exception as exc:  # model code can raise anything; it is the unit's failure, not ours
            shutil.rmtree(staging, ignore_errors=True)
            return {"key": key, "status": "failed", "step": step,
                    "error": f"{type(exc).__name__}: {str(exc)[:500]}", "warning": warning}
    return {"key": key, "status": "built", "warning": warning}


def _flatten(value: Any) -> list[Any]:
    import torch.utils._pytree as pytree

    return [v for v in pytree.tree_leaves(value)]


def _build(unit: UnitPlan, manifest_dir: Path, staging: Path, step: Callable[[str], None]) -> dict[str, Any]:
    verify = unit.step_of("verify")
    # Started now so that its imports overlap with the lowering below; it waits for its job on stdin.
    verifier = _start_verifier() if verify.run else None
    try:
        return _build_steps(unit, manifest_dir, staging, step, verifier)
    finally:
        if verifier is not None and verifier.poll() is None:
            verifier.kill()
            verifier.wait()


def _start_verifier() -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "deployc.runtime.verify_worker"], stdin=subprocess.PIPE,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def _build_steps(unit: UnitPlan, manifest_dir: Path, staging: Path, step: Callable[[str], None],
                 verifier: subprocess.Popen[str] | None) -> dict[str, Any]:
    import torch

    from deployc.graph.export import MethodModule, export_model
    from deployc.graph.inputs import export_point, make_inputs
    from deployc.graph.lower import lower_program, program_facts
    from deployc.graph.model import load_model
    from deployc.graph.quantize import pt2e_quantize, torchao_quantize

    load, export, quant, lower = (unit.step_of(s) for s in ("load", "export", "quantize", "lower"))
    verify = unit.step_of("verify")
    durations: dict[str, float] = {}
    clock = time.perf_counter()

    def lap(name: str) -> None:
        nonlocal clock
        now = time.perf_counter()
        durations[name] = round(now - clock, 3)
        clock = now

    step("load")
    model = load_model(load, manifest_dir)
    # forward first, then the further methods; each has its own inputs, all share the dims.
    signatures = [("forward", "forward", export.inputs)] + [(m.name, m.function, m.inputs) for m in export.methods]
    examples = {name: make_inputs(inputs, export_point(export.dims), export.seed) for name, _, inputs in signatures}
    checks: list[tuple[str, dict[str, int], list[Any]]] = []  # (method, dims, inputs) at every point
    for name, _, inputs in signatures:
        checks += [(name, p, make_inputs(inputs, p, export.seed + 1 + i)) for i, p in enumerate(verify.points)]
    functions = {name: getattr(model, function) for name, function, _ in signatures}
    with torch.no_grad():
        references = [[t.detach().clone() for t in _flatten(functions[name](*inp))] for name, _, inp in checks]
    lap("load")

    recipe = quant.recipe
    step("quantize" if recipe.method == "torchao" else "export")
    if recipe.method == "torchao":
        model = torchao_quantize(model, recipe)
        lap("quantize")
        step("export")
    programs = {name: export_model(model if name == "forward" else MethodModule(model, function), examples[name],
                                   inputs, export.dims, by_name=name == "forward")
                for name, function, inputs in signatures}
    fault_point("export")
    lap("export")
    if recipe.method == "pt2e":  # single-method programs only (the manifest refuses the rest)
        step("quantize")
        calibration = _calibration(recipe, export, manifest_dir, make_inputs, export_point)
        programs["forward"] = pt2e_quantize(programs["forward"], lower.backend, recipe, calibration,
                                            lambda m: export_model(m, examples["forward"], export.inputs, export.dims))
        lap("quantize")

    step("lower")
    facts, program = lower_program(programs, lower, recipe.scheme)
    facts.update(program_facts(program))
    lap("lower")
    step("serialize")
    pte = staging / PROGRAM_FILE
    pte.write_bytes(program.buffer)
    lap("serialize")

    outputs = {name: _output_shapes([r for (m, _, _), r in zip(checks, references) if m == name])
               for name, _, _ in signatures}
    if verifier is not None:
        step("verify")
        verification = _verify(pte, checks, references, verifier)
        lap("verify")
    else:
        verification = {"status": "not-run", "reason": verify.reason}
    return {
        "schema_version": REPORT_SCHEMA_VERSION,
        "program_key": unit.program_key,
        "backend": unit.backend,
        "quantization": unit.quantization,
        "size_bytes": pte.stat().st_size,
        "inputs": [i.model_dump(mode="json") for i in export.inputs],
        "dims": [d.model_dump(mode="json") for d in export.dims],
        "outputs": outputs["forward"],
        "signatures": {name: {"inputs": [i.model_dump(mode="json") for i in inputs], "outputs": outputs[name]}
                       for name, _, inputs in signatures},
        **facts,
        "verification": verification,
        "durations_s": durations,
    }


def _calibration(recipe: Any, export: Any, manifest_dir: Path, make_inputs: Any, export_point: Any) -> list[Any]:
    """The manifest's dataset (sha256-checked), or seeded random samples within the inputs' ranges."""
    if not recipe.calibration_dataset:
        return [make_inputs(export.inputs, export_point(export.dims), (recipe.calibration_seed or 0) + 1000 + j)
                for j in range(recipe.calibration_samples or 1)]
    import torch

    from deployc.fingerprint import file_sha256

    path = manifest_dir / recipe.calibration_dataset
    if file_sha256(path) != recipe.calibration_dataset_sha256:
        raise BuildError(f"calibration dataset {recipe.calibration_dataset} changed since the plan was made")
    samples = torch.load(path, weights_only=True)
    if not isinstance(samples, (list, tuple)) or not samples or not all(
            isinstance(s, (list, tuple)) and len(s) == len(export.inputs) for s in samples):
        raise BuildError(f"calibration dataset {recipe.calibration_dataset}: expected a non-empty list of samples, "
                         f"each a list of {len(export.inputs)} tensor(s) in input order")
    return [list(s) for s in samples]


def _output_shapes(references: list[list[Any]]) -> list[dict[str, Any]]:
    """Per output: dtype and shape; a size that varies across the checked points becomes {min, max}."""
    out = []
    for i, first in enumerate(references[0]):
        sizes = [list(p[i].shape) for p in references]
        shape: list[Any] = []
        for axis in range(len(sizes[0])):
            values = {s[axis] for s in sizes}
            shape.append(values.pop() if len(values) == 1 else {"min": min(s[axis] for s in sizes),
                                                                  "max": max(s[axis] for s in sizes)})
        out.append({"name": f"output_{i}", "dtype": str(first.dtype).removeprefix("torch."), "shape": shape})
    return out


def _verify(pte: Path, checks: list[tuple[str, dict[str, int], list[Any]]], references: list[list[Any]],
            verifier: subprocess.Popen[str]) -> dict[str, Any]:
    import torch

    from deployc.graph.metrics import compare, summarize

    with tempfile.TemporaryDirectory(prefix="deployc-verify-") as tmp:
        inputs_path, outputs_path = Path(tmp) / "inputs.pt", Path(tmp) / "outputs.pt"
        torch.save([(method, inputs) for method, _, inputs in checks], inputs_path)
        try:
            _, stderr = verifier.communicate(f"{pte} {inputs_path} {outputs_path}\n", timeout=VERIFY_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            verifier.kill()
            verifier.wait()
            return {"status": "error", "reason": f"the runtime did not finish within {VERIFY_TIMEOUT_S} s"}
        if verifier.returncode != 0:
            code = verifier.returncode
            tail = " | ".join(line for line in stderr.strip().splitlines()[-3:])
            how = f"killed by signal {-code}" if code < 0 else f"exit code {code}"
            return {"status": "error", "reason": f"executorch.runtime crashed ({how}): {tail[:400]}"}
        result = torch.load(outputs_path, weights_only=True)
    measured = []
    for (method, size, _), ref, got in zip(checks, references, result["outputs"]):
        if len(ref) != len(got):
            return {"status": "error", "reason": f"program returned {len(got)} outputs, eager {len(ref)}"}
        try:
            metrics = [compare(r.float().numpy(), g.float().numpy()) for r, g in zip(ref, got)]
        except ValueError as exc:
            return {"status": "error", "reason": f"at {size}: {exc}"}
        measured.append({"method": method, "dims": size, "outputs": metrics})
    return {"status": "measured", "points": measured, "summary": summarize(measured),
            "latency_ms": round(result["latency_ms"], 4), "load_s": round(result["load_s"], 4)}
