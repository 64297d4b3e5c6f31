"""Execute a bundle's pipeline on this host from the bundle alone (runtime.json, programs, assets),
through the ExecuTorch runtime. This is what an app does with runtime.bin; `deployc run` drives it."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import numpy as np

from deployc.core.errors import RunError, UserError
from deployc.core.layout import RUNTIME_JSON
from deployc.packaging.inspection import verify_bundle
from deployc.pipeline.host.generation import generate, prompt_room
from deployc.pipeline.host.tokenizers import encode, load_tokenizer


class Bundle:
    def __init__(self, folder: Path) -> None:
        problems = verify_bundle(folder)
        if problems:
            raise RunError(f"{folder}: bundle does not match its lock: " + "; ".join(problems))
        self.folder = folder
        self.config = json.loads((folder / RUNTIME_JSON).read_text())
        self.programs = {p["name"]: p for p in self.config["programs"]}
        self._programs: dict[str, Any] = {}
        self._methods: dict[tuple[str, str], Any] = {}
        self._tokenizers: dict[tuple[str, int | None], Any] = {}
        self._indexes: dict[str, tuple[dict[str, Any], np.ndarray]] = {}
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

    def tokenizer(self, file: str, max_length: int | None) -> Any:
        key = (file, max_length)
        if key not in self._tokenizers:
            self._tokenizers[key] = load_tokenizer(self.folder / file, max_length)
        return self._tokenizers[key]

    def index(self, file: str) -> tuple[dict[str, Any], np.ndarray]:
        if file not in self._indexes:
            meta = json.loads((self.folder / file).read_text())
            raw = np.fromfile(self.folder / Path(file).parent / meta["vectors"], dtype="<f4")
            self._indexes[file] = (meta, raw.reshape(meta["count"], meta["dim"]))
        return self._indexes[file]

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
                self.method(stage["program"], stage["method"])
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
        op = stage["op"]
        if op in ("image", "audio"):
            from deployc.pipeline.host.preprocess import (
                PreprocessError,
                audio_steps,
                image_steps,
            )

            try:
                if op == "image":
                    return {"pixels": image_steps(args["input"], params["steps"])}
                return {"features": audio_steps(args["input"], params["steps"])}
            except PreprocessError as exc:
                raise UserError.at(self.folder, f"stage {stage['name']} ({op}): {exc}") from exc
        if op == "similarity":
            return similarity(args["a"], args["b"], params["metric"], params["top_k"])
        if op == "tokenize":
            ids, mask = encode(self.tokenizer(params["tokenizer"], params["max_length"]), args["input"],
                               params.get("pad_to", 0))
            return {"input_ids": ids, "attention_mask": mask}
        if op == "model":
            signature = self.signature(stage["program"], stage["method"])
            outs = self.call(stage["program"], [args[i["name"]] for i in signature["inputs"]], stage["method"])
            return {o["name"]: v for o, v in zip(signature["outputs"], outs)}
        if op == "vector_search":
            return self.search(params, args["query"])
        if op == "template":
            text = {k: _as_text(v) for k, v in args.items()}
            return {"text": params["template"].format(**text)}
        if op == "generate":
            return self.generate(stage["program"], params, args["prompt"])
        raise RunError(f"stage {stage['name']}: unknown op {op!r} (bundle from a newer deployc?)")

    def search(self, params: dict[str, Any], query: np.ndarray) -> dict[str, Any]:
        meta, vectors = self.index(params["index"])
        q = np.asarray(query, dtype=np.float32).reshape(-1)
        if q.shape[0] != meta["dim"]:
            raise RunError(f"query has dimension {q.shape[0]}, index {meta['name']} holds {meta['dim']}")
        scores = vectors @ q / (np.linalg.norm(vectors, axis=1) * np.linalg.norm(q) + 1e-12)
        top = np.argsort(-scores, kind="stable")[: params["top_k"]]
        chunks = [{**meta["chunks"][i], "score": round(float(scores[i]), 6)} for i in top]
        return {"chunks": chunks, "text": _as_text(chunks), "scores": scores[top].astype(np.float32)}

    def generate(self, program: str, params: dict[str, Any], prompt: str) -> dict[str, Any]:
        tk = self.tokenizer(params["tokenizer"], None)
        ids = tk.encode(prompt, add_special_tokens=False).ids
        if "bos_id" in params:
            ids = [params["bos_id"], *ids]
        stops = params.get("stop", [])

        calls: list[float] = []  # when each decoder call began: the second one follows the first token

        def step(tokens: np.ndarray, positions: np.ndarray) -> np.ndarray:
            calls.append(time.perf_counter())
            return self.call(program, [tokens, positions])[0]

        def stopped(out: list[int]) -> bool:
            text = tk.decode(out)
            return any(s in text for s in stops)

        start = time.perf_counter()
        new = generate(step, ids, params["max_new_tokens"], params["max_seq_len"], params.get("eos_ids", []),
                       params["temperature"], params["top_p"], params["seed"], stopped if stops else None)
        end = time.perf_counter()
        first = (calls[1] if len(calls) > 1 else end) - start
        room = prompt_room(params["max_new_tokens"], params["max_seq_len"])
        per_token = (end - calls[1]) * 1000 / (len(calls) - 1) if len(calls) > 1 else 0.0
        self.generation = {"prompt_tokens": min(len(ids), room), "tokens": len(new),
                           "first_token_ms": round(first * 1000, 3), "per_token_ms": round(per_token, 3)}
        text = tk.decode(new)
        for s in stops:
            text = text.split(s)[0]
        return {"text": text, "tokens": np.asarray([new], dtype=np.int64)}


def similarity(a: np.ndarray, b: np.ndarray, metric: str, top_k: int) -> dict[str, Any]:
    """Scores of the one embedding `a` against every row of `b` (float64 sums, as the native runner),
    and the rows' indices best first (the first on ties)."""
    q = np.asarray(a, dtype=np.float64).reshape(-1)
    rows = np.asarray(b, dtype=np.float64).reshape(-1, q.shape[0]) if q.size else np.zeros((0, 0))
    scores = rows @ q
    if metric == "cosine":
        scores = scores / (np.linalg.norm(rows, axis=1) * np.linalg.norm(q) + 1e-12)
    top = np.argsort(-scores, kind="stable")[:top_k]
    return {"scores": scores.astype(np.float32), "top": top.astype(np.int64)}


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


def _as_text(value: Any) -> str:
    if isinstance(value, list):
        return "\n\n".join(c["text"] for c in value)
    return str(value)


def jsonable(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, dict):
        return {k: jsonable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [jsonable(v) for v in value]
    return value
