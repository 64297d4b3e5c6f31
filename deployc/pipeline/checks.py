"""Validate-time checks of a manifest's pipeline: references, types between stages, cycles, unused
stages, assets. Every problem is located in the manifest. Pure Python."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from deployc.core.errors import Diagnostic
from deployc.core.yaml_io import Document
from deployc.load.diagnostics import closest
from deployc.load.manifest import (
    AudioStage,
    GenerateStage,
    ImageStage,
    Manifest,
    ModelStage,
    SimilarityStage,
    TemplateStage,
    TokenizeStage,
    VectorSearchStage,
)
from deployc.pipeline.dataflow import TEXT, Port, references, signature, stage_outputs
from deployc.pipeline.files import IMAGE_SUFFIXES, corpus_files, tokenizer_file
from deployc.pipeline.preprocessing import audio_steps, image_steps

_PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")


class _Checker:
    def __init__(self, m: Manifest, doc: Document, folder: Path) -> None:
        assert m.pipeline is not None
        self.m, self.p, self.doc, self.folder = m, m.pipeline, doc, folder
        self.out: list[Diagnostic] = []
        self.stages = {s.name: s for s in self.p.stages}
        self.index_of = {s.name: i for i, s in enumerate(self.p.stages)}

    def err(self, path: tuple[str | int, ...], msg: str, hint: str | None = None, key: bool = False) -> None:
        self.out.append(Diagnostic(self.doc.locate(("pipeline", *path), key=key), msg, hint))

    def stage_path(self, name: str, field: str = "") -> tuple[str | int, ...]:
        base: tuple[str | int, ...] = ("stages", self.index_of[name])
        return (*base, *field.split(".")) if field else base

    def where(self, name: str, field: str) -> str:
        return f"pipeline.stages[{self.index_of[name]}].{field}"

    def resolve(self, ref: str, path: tuple[str | int, ...], field: str) -> Port | None:
        if "." not in ref:
            if ref in self.p.inputs:
                return Port(self.p.inputs[ref].type)
            self.err(path, f"{field}: '{ref}' is neither a pipeline input nor 'stage.port'",
                     closest(ref, [*self.p.inputs, *self.stages]))
            return None
        stage, port = ref.split(".", 1)
        if stage not in self.stages:
            self.err(path, f"{field}: no stage named '{stage}'", closest(stage, self.stages))
            return None
        ports = stage_outputs(self.stages[stage], self.m, self.folder)
        if port not in ports:
            self.err(path, f"{field}: stage '{stage}' has no output '{port}'",
                     f"its outputs: {', '.join(ports) or 'none (declare the model outputs)'}")
            return None
        return ports[port]

    def expect(self, got: Port | None, want: Port, path: tuple[str | int, ...], field: str) -> None:
        if got is None:
            return
        same_rank = len(got.shape) == len(want.shape)
        if got.kind != want.kind or (want.kind == "tensor" and (got.dtype != want.dtype or not same_rank)):
            self.err(path, f"{field}: type mismatch: gets {got}, expects {want}")
        elif want.kind == "tensor" and any(isinstance(g, int) and isinstance(w, int) and g != w
                                           for g, w in zip(got.shape, want.shape)):
            self.err(path, f"{field}: shape mismatch: gets {got}, expects {want}")

    def check(self) -> list[Diagnostic]:
        p = self.p
        names: set[str] = set()
        for i, s in enumerate(p.stages):
            if s.name in names:
                self.err(("stages", i, "name"), f"pipeline.stages[{i}].name: stage '{s.name}' is defined twice")
            if s.name in p.inputs:
                self.err(("stages", i, "name"), f"pipeline.stages[{i}].name: '{s.name}' is also a pipeline input")
            names.add(s.name)
        self.assets()
        for s in p.stages:
            self.stage(s)
        self.cycles()
        used = {ref.split(".")[0] for s in p.stages for ref in references(s).values()}
        for name, ref in p.outputs.items():
            self.resolve(ref, ("outputs", name), f"pipeline.outputs.{name}")
            used.add(ref.split(".")[0])
        for s in p.stages:
            if s.name not in used:
                self.err(self.stage_path(s.name, "name"), f"{self.where(s.name, 'name')}: stage '{s.name}' is never "
                         "used: no stage or pipeline output reads it")
        for name in p.inputs:
            if name not in used:
                self.err(("inputs", name), f"pipeline.inputs.{name}: input is never used", key=True)
        return self.out

    def known(self, kind: str, name: str, table: dict[str, Any], path: tuple[str | int, ...], field: str) -> bool:
        if name in table:
            return True
        self.err(path, f"{field}: no {kind} named '{name}'", closest(name, table) or
                 (f"{kind}s: {', '.join(table)}" if table else f"declare it under pipeline.{kind}s"
                  if kind != "model" else None))
        return False

    def assets(self) -> None:
        for name, t in self.p.tokenizers.items():
            path = ("tokenizers", name)
            ways = [t.path is not None, t.huggingface is not None, t.package is not None or t.file is not None]
            if sum(ways) != 1 or (t.package is None) != (t.file is None):
                self.err(path, f"pipeline.tokenizers.{name}: give one of `path`, `huggingface`, or both `package` "
                         "and `file`")
            elif tokenizer_file(t, self.folder) is None:
                where = (t.path if t.path else f"tokenizer.json in {t.huggingface}" if t.huggingface
                         else f"{t.file} in package {t.package}")
                self.err(path, f"pipeline.tokenizers.{name}: tokenizer file not found: {where}")
        for name, ix in self.p.indexes.items():
            path = ("indexes", name)
            if self.known("model", ix.model, self.m.models, (*path, "model"), f"pipeline.indexes.{name}.model"):
                spec = self.m.models[ix.model]
                if spec.task != "embedding" or len(spec.outputs) != 1:
                    self.err((*path, "model"), f"pipeline.indexes.{name}.model: '{ix.model}' must have task: "
                             "embedding and declare exactly one output (the embedding)")
            if (ix.tokenizer is None) == (ix.image is None):
                self.err(path, f"pipeline.indexes.{name}: give `tokenizer` (a text corpus) or `image` (an image "
                         "corpus: the image stage that prepares each image), one of them")
            elif ix.tokenizer is not None:
                self.known("tokenizer", ix.tokenizer, self.p.tokenizers, (*path, "tokenizer"),
                           f"pipeline.indexes.{name}.tokenizer")
            elif ix.image is not None and not isinstance(self.stages.get(ix.image), ImageStage):
                self.err((*path, "image"), f"pipeline.indexes.{name}.image: no image stage named '{ix.image}'",
                         closest(ix.image, [s.name for s in self.p.stages if isinstance(s, ImageStage)]))
            files, problems = corpus_files(ix, self.folder)
            if ix.image is not None:
                problems += [f"{f.relative_to(self.folder)} is not a PNG or JPEG file (an image index)"
                             for f in files if f.suffix.lower() not in IMAGE_SUFFIXES]
            for problem in problems:
                self.err((*path, "corpus"), f"pipeline.indexes.{name}.corpus: {problem}")
            if not files and not problems:
                self.err((*path, "corpus"), f"pipeline.indexes.{name}.corpus: '{ix.corpus}' matches no files")
            if ix.chunking.overlap >= ix.chunking.words:
                self.err((*path, "chunking"), f"pipeline.indexes.{name}.chunking: overlap must be smaller than words")

    def stage(self, s: Any) -> None:
        name = s.name
        if isinstance(s, (ImageStage, AudioStage)):
            kind = "image" if isinstance(s, ImageStage) else "audio"
            self.expect(self.resolve(s.input, self.stage_path(name, "input"), self.where(name, "input")), Port(kind),
                        self.stage_path(name, "input"), self.where(name, "input"))
            _, problems = image_steps(s, self.folder) if isinstance(s, ImageStage) else audio_steps(s, self.folder)
            for field, message in problems:
                self.err(self.stage_path(name, field), f"{self.where(name, field)}: {message}")
        elif isinstance(s, SimilarityStage):
            got = {f: self.resolve(getattr(s, f), self.stage_path(name, f), self.where(name, f)) for f in ("a", "b")}
            for f, port in got.items():
                if port is not None and (port.kind != "tensor" or port.dtype != "float32" or len(port.shape) != 2):
                    self.err(self.stage_path(name, f), f"{self.where(name, f)}: type mismatch: gets {port}, expects "
                             "an embedding: tensor float32[rows, dim]")
            a, b = got["a"], got["b"]
            if a is not None and b is not None and a.kind == b.kind == "tensor" and a.shape and b.shape and \
                    isinstance(a.shape[-1], int) and isinstance(b.shape[-1], int) and a.shape[-1] != b.shape[-1]:
                self.err(self.stage_path(name, "b"), f"{self.where(name, 'b')}: {a.shape[-1]}-dimensional `a` "
                         f"against {b.shape[-1]}-dimensional `b`")
        elif isinstance(s, TokenizeStage):
            self.known("tokenizer", s.tokenizer, self.p.tokenizers, self.stage_path(name, "tokenizer"),
                       self.where(name, "tokenizer"))
            self.expect(self.resolve(s.input, self.stage_path(name, "input"), self.where(name, "input")), TEXT,
                        self.stage_path(name, "input"), self.where(name, "input"))
        elif isinstance(s, ModelStage):
            if not self.known("model", s.model, self.m.models, self.stage_path(name, "model"),
                              self.where(name, "model")):
                return
            spec = self.m.models[s.model]
            sig = signature(spec, s.method)
            if sig is None:
                self.err(self.stage_path(name, "method"), f"{self.where(name, 'method')}: model '{s.model}' has "
                         f"no method '{s.method}'", closest(s.method, ["forward", *spec.methods]))
                return
            inputs, outputs = sig
            if not outputs:
                self.err(self.stage_path(name, "model"), f"{self.where(name, 'model')}: model '{s.model}' must "
                         f"declare the `outputs` of {s.method} to be used in a pipeline")
            missing = [n for n in inputs if n not in s.inputs]
            if missing:
                self.err(self.stage_path(name, "inputs"), f"{self.where(name, 'inputs')}: model '{s.model}' "
                         f"needs inputs {', '.join(missing)}", key=True)
            for port, ref in s.inputs.items():
                field = f"inputs.{port}"
                got = self.resolve(ref, self.stage_path(name, field), self.where(name, field))
                if port not in inputs:
                    self.err(self.stage_path(name, field), f"{self.where(name, field)}: model '{s.model}' has no "
                             f"input '{port}'", closest(port, inputs), key=True)
                    continue
                want = inputs[port]
                self.expect(got, Port("tensor", want.dtype, tuple(want.shape)), self.stage_path(name, field),
                            self.where(name, field))
                self.token_lengths(ref, s.model, want.shape, port, name, field)
        elif isinstance(s, VectorSearchStage):
            got = self.resolve(s.query, self.stage_path(name, "query"), self.where(name, "query"))
            if self.known("index", s.index, self.p.indexes, self.stage_path(name, "index"), self.where(name, "index")):
                spec = self.m.models.get(self.p.indexes[s.index].model)
                if spec and spec.outputs and got is not None:
                    emb = next(iter(spec.outputs.values()))
                    want = Port("tensor", emb.dtype, tuple(emb.shape))
                    # dims compared below, with the index named
                    self.expect(got, Port("tensor", emb.dtype, tuple(str(d) for d in emb.shape)),
                                self.stage_path(name, "query"), self.where(name, "query"))
                    if got.kind == "tensor" and got.shape and want.shape and got.shape[-1] != want.shape[-1]:
                        self.err(self.stage_path(name, "query"), f"{self.where(name, 'query')}: the query has "
                                 f"dimension {got.shape[-1]} but index '{s.index}' holds {want.shape[-1]}-dimensional "
                                 f"vectors from model '{self.p.indexes[s.index].model}'")
        elif isinstance(s, TemplateStage):
            placeholders = set(_PLACEHOLDER.findall(s.template))
            for port, ref in s.inputs.items():
                field = f"inputs.{port}"
                got = self.resolve(ref, self.stage_path(name, field), self.where(name, field))
                if got is not None and got.kind == "tensor":
                    self.err(self.stage_path(name, field), f"{self.where(name, field)}: type mismatch: gets {got}, "
                             "expects text or chunks")
                if port not in placeholders:
                    self.err(self.stage_path(name, field), f"{self.where(name, field)}: the template has no "
                             f"{{{port}}} placeholder", key=True)
            for missing in sorted(placeholders - set(s.inputs)):
                self.err(self.stage_path(name, "template"), f"{self.where(name, 'template')}: placeholder "
                         f"{{{missing}}} has no entry under inputs")
        elif isinstance(s, GenerateStage):
            if self.known("model", s.model, self.m.models, self.stage_path(name, "model"), self.where(name, "model")):
                spec = self.m.models[s.model]
                if spec.task != "text-generation":
                    self.err(self.stage_path(name, "model"), f"{self.where(name, 'model')}: model '{s.model}' "
                             "must have task: text-generation")
                for needed in ("max_seq_len", "eos_ids"):
                    if needed not in spec.constants:
                        self.err(self.stage_path(name, "model"), f"{self.where(name, 'model')}: model '{s.model}' "
                                 f"must declare constants.{needed}")
                if set(spec.inputs) != {"tokens", "input_pos"}:
                    self.err(self.stage_path(name, "model"), f"{self.where(name, 'model')}: a text-generation "
                             "model takes exactly the inputs tokens [1, seq] and input_pos [seq]")
            self.known("tokenizer", s.tokenizer, self.p.tokenizers, self.stage_path(name, "tokenizer"),
                       self.where(name, "tokenizer"))
            self.expect(self.resolve(s.prompt, self.stage_path(name, "prompt"), self.where(name, "prompt")), TEXT,
                        self.stage_path(name, "prompt"), self.where(name, "prompt"))

    def token_lengths(self, ref: str, model: str, shape: list[Any], port: str, name: str, field: str) -> None:
        """A tokenize stage must not produce more tokens than the model's dim allows."""
        spec = self.m.models[model]
        source = self.stages.get(ref.split(".")[0])
        if not isinstance(source, TokenizeStage):
            return
        for d in shape:
            if isinstance(d, str) and d in spec.dims and spec.dims[d].multiple_of and len(set(spec.dims[d].bounds())) > 1:
                self.err(self.stage_path(name, field), f"{self.where(name, field)}: stage '{source.name}' "
                         f"produces any number of tokens, but model '{model}' input '{port}' takes {d} in "
                         f"multiples of {spec.dims[d].multiple_of}; a tokenize stage cannot feed it yet",
                         f"make {d} static instead ({d}: {{min: N, max: N}}, N a multiple): the tokenize stage "
                         "then pads to N")
            elif isinstance(d, str) and d in spec.dims and spec.dims[d].max < source.max_length:
                self.err(self.stage_path(name, field), f"{self.where(name, field)}: stage '{source.name}' "
                         f"produces up to {source.max_length} tokens, but model '{model}' input '{port}' "
                         f"allows {d} <= {spec.dims[d].max}")

    def cycles(self) -> None:
        state: dict[str, int] = {}

        def visit(name: str, trail: list[str]) -> None:
            state[name] = 1
            for ref in references(self.stages[name]).values():
                dep = ref.split(".")[0]
                if dep not in self.stages:
                    continue
                if state.get(dep) == 1:
                    cycle = " -> ".join([*trail[trail.index(dep):], name, dep]) if dep in trail else f"{name} -> {dep}"
                    self.err(self.stage_path(name, "name"), f"{self.where(name, 'name')}: cycle {cycle}")
                elif dep not in state:
                    visit(dep, [*trail, name])
            state[name] = 2

        for s in self.p.stages:
            if s.name not in state:
                visit(s.name, [])


def check_pipeline(m: Manifest, doc: Document, folder: Path) -> list[Diagnostic]:
    return _Checker(m, doc, folder).check() if m.pipeline is not None else []

