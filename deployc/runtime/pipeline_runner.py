"""Execute a bundle's pipeline on this host from the bundle alone (runtime.json, programs, assets),
through the ExecuTorch runtime. This is what an app does with runtime.bin; `deployc run` drives it."""

from __future__ import annotations

import json
import os
import time
import weakref
from pathlib import Path
from typing import Any

import numpy as np

from deployc.core.errors import PreprocessError, RunError, UserError
from deployc.core.layout import RUNTIME_JSON
from deployc.core.static_decoder import StaticDecoderLayout
from deployc.packaging.inspection import verify_bundle
from deployc.pipeline.host.bundle_files import BundleFiles
from deployc.pipeline.host.static_decoding import StaticDecoding
from deployc.pipeline.ops import OPS


class Bundle(BundleFiles):
    """A bundle opened on this host: what its stages' ops run with (pipeline/ops/base.Host)."""

    def __init__(self, folder: Path) -> None:
        problems = verify_bundle(folder)
        if problems:
            raise RunError(f"{folder}: bundle does not match its lock: " + "; ".join(problems))
        super().__init__(folder)
        self.config = json.loads((folder / RUNTIME_JSON).read_text())
        self.programs = {p["name"]: p for p in self.config["programs"]}
        self._programs: dict[str, Any] = {}
        self._methods: dict[tuple[str, str], Any] = {}
        self._sessions: dict[str, StaticDecoding] = {}  # decoders in the static form: their caches
        self.generation: dict[str, Any] = {}  # the last generate stage's figures

    # ---- resources, loaded once -------------------------------------------------------------------------
    def method(self, program: str, name: str = "forward") -> Any:
        if (program, name) not in self._methods:
            from deployc.graph.host_runtime import load_any

            if program not in self._programs:
                self._prepare(program)
                entry = self.programs[program]
                data = self.folder / entry["data_file"] if entry.get("data_file") else None
                if data is not None and not data.is_file():  # the raw runtime segfaults without it
                    raise RunError(f"program {program}: its weights file {entry['data_file']} is missing")
                self._programs[program] = load_any(self.folder / entry["file"], data)
            try:
                self._methods[(program, name)] = self._programs[program].load_method(name)
            except RuntimeError as exc:
                entry = self.programs[program]
                raise RunError(f"program {program} ({entry['backend']}, unit {entry['unit']}) cannot run on this "
                               f"host: {exc}") from exc
        return self._methods[(program, name)]

    def load(self, program: str, method: str = "forward") -> None:
        """Loads a method; a static decoder's `forward` (its interface) is its two methods."""
        static = self.programs[program].get("static_decoder")
        names = [static["prefill_method"], static["decode_method"]] if static and method == "forward" else [method]
        for name in names:
            self.method(program, name)

    def _prepare(self, program: str) -> None:
        """What the program's backend needs in this process (QNN: its host libraries and the HTP emulator)."""
        from deployc.core.errors import BuildError
        from deployc.targets.backends import BACKENDS

        entry = self.programs[program]
        backend = BACKENDS.get(entry["backend"])
        if backend is None:
            raise RunError(f"program {program}: backend {entry['backend']!r} is unknown to this deployc")
        try:
            os.environ.update(backend.child_env())
        except BuildError as exc:
            raise RunError(f"program {program} runs on {entry['backend']} (unit {entry['unit']}); this host can run "
                           f"it only with that backend's host libraries: {exc}") from exc

    # ---- programs ---------------------------------------------------------------------------------------
    def signature(self, program: str, method: str) -> dict[str, Any]:
        return next(m for m in self.programs[program]["methods"] if m["name"] == method)

    def check_inputs(self, program: str, tensors: list[np.ndarray], method: str = "forward") -> None:
        """The declared dynamic ranges: the ExecuTorch runtime only checks buffer capacity."""
        for spec, t in zip(self.signature(program, method)["inputs"], tensors):
            if len(spec["shape"]) != t.ndim:
                raise UserError.at(self.folder, f"program {program} input {spec['name']}: rank {t.ndim}, "
                                                f"declared {len(spec['shape'])}")
            for axis, (d, size) in enumerate(zip(spec["shape"], t.shape)):
                name = d.get("symbol") or f"dim {axis}"
                if not d["min"] <= size <= d["max"]:
                    raise UserError.at(self.folder, f"program {program} input {spec['name']}: {name} = {size} is "
                                                    f"outside the declared range [{d['min']}, {d['max']}]")
                if size % d.get("multiple_of", 1):
                    raise UserError.at(self.folder, f"program {program} input {spec['name']}: {name} = {size} is "
                                                    f"not a multiple of {d['multiple_of']}")

    def call(self, program: str, tensors: list[np.ndarray], method: str = "forward") -> list[np.ndarray]:
        static = self.programs[program].get("static_decoder")
        if static is not None and method == "forward":  # the decoder's interface, through its driver
            return [self._session(program, static).forward(*tensors)]
        return self._call(program, tensors, method)

    def _session(self, program: str, static: dict[str, Any]) -> StaticDecoding:
        """One set of caches per program, kept across calls as a program keeps its own cache: a call that
        starts at position 0 again overwrites them."""
        if program not in self._sessions:
            shapes = StaticDecoderLayout.model_validate({k: v for k, v in static.items() if k != "mask_layout"})
            # A weak reference: the bundle holds the session, and a cycle back to it would keep its programs
            # (and the QNN context, whose teardown prints) alive past `deployc run`'s capture of library output.
            bundle = weakref.proxy(self)

            def call(method: str, tensors: list[np.ndarray]) -> list[np.ndarray]:
                return bundle._call(program, tensors, method)

            self._sessions[program] = StaticDecoding(shapes, call)
        return self._sessions[program]

    def _call(self, program: str, tensors: list[np.ndarray], method: str) -> list[np.ndarray]:
        import torch

        self.check_inputs(program, tensors, method)
        try:
            outs = self.method(program, method)([torch.from_numpy(np.ascontiguousarray(t)) for t in tensors])
        except RuntimeError as exc:
            raise RunError(f"program {program} failed: {exc}") from exc
        return [o.detach().numpy().copy() for o in outs]

    # ---- the pipeline -----------------------------------------------------------------------------------
    def run(self, inputs: dict[str, str]) -> dict[str, Any]:
        """`inputs`: text by value, images and audio by file path. Inputs may be left out: the stages
        that need them are skipped, and so are the outputs (at least one output must remain)."""
        pipeline = self.config.get("pipeline")
        if not pipeline:
            raise UserError.at(self.folder, "bundle has no pipeline to run")
        types = dict(zip(pipeline["inputs"], pipeline.get("input_types") or ["text"] * len(pipeline["inputs"])))
        described = ", ".join(f"{n} ({t})" for n, t in types.items())
        unknown = [n for n in inputs if n not in types]
        if unknown or not inputs:
            raise UserError.at(self.folder, f"pipeline inputs are {described}; "
                               + (f"unknown {', '.join(unknown)}" if unknown else "give at least one"))
        values: dict[str, Any] = {n: (v if types[n] == "text" else _file(n, v)) for n, v in inputs.items()}
        runnable = [s for s in pipeline["stages"] if _ready(s, values, pipeline["stages"])]
        outputs_ref = [item.split("=", 1) for item in pipeline["outputs"]]
        reachable = {s["name"] for s in runnable} | set(values)
        if not any(ref.split(".")[0] in reachable for _, ref in outputs_ref):
            raise UserError.at(self.folder, f"no pipeline output can be computed from {', '.join(inputs)}; "
                               f"pipeline inputs are {described}")
        self.generation = {}
        t = time.perf_counter()
        for stage in runnable:  # load every program first: stage latencies exclude loading
            if stage["program"]:
                self.load(stage["program"], stage["method"])
        load_ms = round((time.perf_counter() - t) * 1000.0, 3)
        latency: dict[str, float] = {}
        for stage in runnable:
            args = {k: values[v] for k, v in (item.split("=", 1) for item in stage["inputs"])}
            t = time.perf_counter()
            outputs = self.stage(stage, args, json.loads(stage["params_json"]))
            latency[stage["name"]] = round((time.perf_counter() - t) * 1000.0, 3)
            values.update({f"{stage['name']}.{k}": v for k, v in outputs.items()})
        result = {name: values[ref] for name, ref in outputs_ref if ref in values}
        return {"outputs": result, "latency_ms": latency, "load_ms": load_ms,
                **({"generation": self.generation} if self.generation else {})}

    def stage(self, stage: dict[str, Any], args: dict[str, Any], params: dict[str, Any]) -> dict[str, Any]:
        """One stage (a runtime config entry: op, and program and method where it calls one) on its inputs."""
        op = OPS.get(stage["op"])
        if op is None:
            raise RunError(f"stage {stage.get('name', '?')}: unknown op {stage['op']!r} (bundle from a newer deployc?)")
        try:
            return op.run(stage, args, params, self)
        except PreprocessError as exc:
            raise UserError.at(self.folder, f"stage {stage.get('name', '?')} ({stage['op']}): {exc}") from exc

    def note(self, figures: dict[str, Any]) -> None:
        self.generation = figures


def _file(name: str, path: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise UserError.at(path, f"--input {name}: cannot read the file: {exc.strerror or exc}") from exc


def _ready(stage: dict[str, Any], values: dict[str, Any], stages: list[dict[str, Any]]) -> bool:
    """Whether every value the stage reads is given or made by a stage that can itself run."""
    made = {s["name"]: s for s in stages}
    for item in stage["inputs"]:
        ref = item.split("=", 1)[1]
        if ref in values:
            continue
        source = made.get(ref.split(".")[0])
        if source is None or not _ready(source, values, stages):
            return False
    return True


def jsonable(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, dict):
        return {k: jsonable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [jsonable(v) for v in value]
    return value
