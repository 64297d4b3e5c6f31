"""Validate-time checks of a manifest's pipeline: names, references, types between stages (each op checks
its own fields, deployc/pipeline/ops/), cycles, unused stages and inputs, assets. Every problem is located
in the manifest. Pure Python."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from deployc.core.diagnostics import closest
from deployc.core.errors import Diagnostic
from deployc.core.yaml_io import Document
from deployc.pipeline.asset_sources import IMAGE_SUFFIXES, corpus_files, gguf_problem, index_queries, tokenizer_file
from deployc.pipeline.graph import references, stage_outputs
from deployc.pipeline.ops import op_of
from deployc.pipeline.ops.tokenize import TokenizeStage
from deployc.pipeline.ports import Port

if TYPE_CHECKING:
    from deployc.pipeline.manifest_view import ManifestView


class _Checker:
    """The `Checks` an op's check is given (ops/base.py), and the pipeline-wide checks."""

    def __init__(self, m: ManifestView, doc: Document, folder: Path) -> None:
        assert m.pipeline is not None
        self.manifest, self.pipeline, self.doc, self.folder = m, m.pipeline, doc, folder
        self.out: list[Diagnostic] = []
        self.stages = {s.name: s for s in self.pipeline.stages}
        self.index_of = {s.name: i for i, s in enumerate(self.pipeline.stages)}

    # ---- located errors ----------------------------------------------------------------------------
    def err(self, path: tuple[str | int, ...], msg: str, hint: str | None = None, key: bool = False) -> None:
        self.out.append(Diagnostic(self.doc.locate(("pipeline", *path), key=key), msg, hint))

    def stage_path(self, name: str, field: str = "") -> tuple[str | int, ...]:
        base: tuple[str | int, ...] = ("stages", self.index_of[name])
        return (*base, *field.split(".")) if field else base

    def where(self, name: str, field: str) -> str:
        return f"pipeline.stages[{self.index_of[name]}].{field}"

    def error(self, stage: Any, field: str, message: str, hint: str | None = None, key: bool = False) -> None:
        self.err(self.stage_path(stage.name, field), f"{self.where(stage.name, field)}: {message}", hint, key)

    # ---- references and types ----------------------------------------------------------------------
    def resolve(self, ref: str, path: tuple[str | int, ...], field: str) -> Port | None:
        p = self.pipeline
        if "." not in ref:
            if ref in p.inputs:
                return Port(p.inputs[ref].type)
            self.err(path, f"{field}: '{ref}' is neither a pipeline input nor 'stage.port'",
                     closest(ref, [*p.inputs, *self.stages]))
            return None
        stage, port = ref.split(".", 1)
        if stage not in self.stages:
            self.err(path, f"{field}: no stage named '{stage}'", closest(stage, self.stages))
            return None
        ports = stage_outputs(self.stages[stage], self.manifest, self.folder)
        if port not in ports:
            self.err(path, f"{field}: stage '{stage}' has no output '{port}'",
                     f"its outputs: {', '.join(ports) or 'none (declare the model outputs)'}")
            return None
        return ports[port]

    def port(self, stage: Any, field: str, ref: str) -> Port | None:
        return self.resolve(ref, self.stage_path(stage.name, field), self.where(stage.name, field))

    def expect(self, stage: Any, field: str, got: Port | None, want: Port) -> None:
        if got is None:
            return
        same_rank = len(got.shape) == len(want.shape)
        if got.kind != want.kind or (want.kind == "tensor" and (got.dtype != want.dtype or not same_rank)):
            self.error(stage, field, f"type mismatch: gets {got}, expects {want}")
        elif want.kind == "tensor" and any(isinstance(g, int) and isinstance(w, int) and g != w
                                           for g, w in zip(got.shape, want.shape)):
            self.error(stage, field, f"shape mismatch: gets {got}, expects {want}")

    def known(self, stage: Any, field: str, kind: str, name: str, table: Mapping[str, Any]) -> bool:
        return self._known(kind, name, table, self.stage_path(stage.name, field), self.where(stage.name, field))

    def _known(self, kind: str, name: str, table: Mapping[str, Any], path: tuple[str | int, ...], field: str) -> bool:
        if name in table:
            return True
        self.err(path, f"{field}: no {kind} named '{name}'", closest(name, table) or
                 (f"{kind}s: {', '.join(table)}" if table else f"declare it under pipeline.{kind}s"
                  if kind != "model" else None))
        return False

    def token_lengths(self, stage: Any, field: str, ref: str, model: str, shape: Sequence[int | str],
                      port: str) -> None:
        spec = self.manifest.models[model]
        source = self.stages.get(ref.split(".")[0])
        if not isinstance(source, TokenizeStage):
            return
        for d in shape:
            dim = spec.dims.get(d) if isinstance(d, str) else None
            if dim is None:
                continue
            if dim.multiple_of and len(set(dim.bounds())) > 1:
                self.error(stage, field, f"stage '{source.name}' produces any number of tokens, but model '{model}' "
                           f"input '{port}' takes {d} in multiples of {dim.multiple_of}; a tokenize stage "
                           "cannot feed it yet",
                           f"make {d} static instead ({d}: {{min: N, max: N}}, N a multiple): the tokenize stage "
                           "then pads to N")
            elif dim.max < source.max_length:
                self.error(stage, field, f"stage '{source.name}' produces up to {source.max_length} tokens, but "
                           f"model '{model}' input '{port}' allows {d} <= {dim.max}")

    # ---- the whole pipeline ------------------------------------------------------------------------
    def check(self) -> list[Diagnostic]:
        p = self.pipeline
        names: set[str] = set()
        for i, s in enumerate(p.stages):
            if s.name in names:
                self.err(("stages", i, "name"), f"pipeline.stages[{i}].name: stage '{s.name}' is defined twice")
            if s.name in p.inputs:
                self.err(("stages", i, "name"), f"pipeline.stages[{i}].name: '{s.name}' is also a pipeline input")
            names.add(s.name)
        self.assets()
        for s in p.stages:
            op_of(s).check(s, self)
        self.cycles()
        used = {ref.split(".")[0] for s in p.stages for ref in references(s).values()}
        for name, ref in p.outputs.items():
            self.resolve(ref, ("outputs", name), f"pipeline.outputs.{name}")
            used.add(ref.split(".")[0])
        for s in p.stages:
            if s.name not in used:
                self.error(s, "name", f"stage '{s.name}' is never used: no stage or pipeline output reads it")
        for name in p.inputs:
            if name not in used:
                self.err(("inputs", name), f"pipeline.inputs.{name}: input is never used", key=True)
        return self.out

    def assets(self) -> None:
        for name, t in self.pipeline.tokenizers.items():
            path = ("tokenizers", name)
            ways = [t.path is not None, t.huggingface is not None, t.package is not None or t.file is not None,
                    t.gguf is not None]
            if sum(ways) != 1 or (t.package is None) != (t.file is None):
                self.err(path, f"pipeline.tokenizers.{name}: give one of `path`, `huggingface`, `gguf`, or both "
                         "`package` and `file`")
            elif t.gguf is not None:
                problem = gguf_problem(t.gguf, self.folder)
                if problem is not None:
                    self.err((*path, "gguf"), f"pipeline.tokenizers.{name}.gguf: {problem}")
            elif tokenizer_file(t, self.folder) is None:
                where = (t.path if t.path else f"tokenizer.json in {t.huggingface}" if t.huggingface
                         else f"{t.file} in package {t.package}")
                self.err(path, f"pipeline.tokenizers.{name}: tokenizer file not found: {where}")
        for name, ix in self.pipeline.indexes.items():
            path = ("indexes", name)
            if self._known("model", ix.model, self.manifest.models, (*path, "model"),
                           f"pipeline.indexes.{name}.model"):
                spec = self.manifest.models[ix.model]
                if spec.task != "embedding" or len(spec.outputs) != 1:
                    self.err((*path, "model"), f"pipeline.indexes.{name}.model: '{ix.model}' must have task: "
                             "embedding and declare exactly one output (the embedding)")
            image_stages = [s.name for s in self.pipeline.stages if s.op == "image"]
            if (ix.tokenizer is None) == (ix.image is None):
                self.err(path, f"pipeline.indexes.{name}: give `tokenizer` (a text corpus) or `image` (an image "
                         "corpus: the image stage that prepares each image), one of them")
            elif ix.tokenizer is not None:
                self._known("tokenizer", ix.tokenizer, self.pipeline.tokenizers, (*path, "tokenizer"),
                            f"pipeline.indexes.{name}.tokenizer")
            elif ix.image is not None and ix.image not in image_stages:
                self.err((*path, "image"), f"pipeline.indexes.{name}.image: no image stage named '{ix.image}'",
                         closest(ix.image, image_stages))
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
            if ix.queries is not None:
                if ix.image is not None:
                    self.err((*path, "queries"), f"pipeline.indexes.{name}.queries: a query set is text; this "
                             "index is of images")
                else:
                    _, unreadable = index_queries(ix.queries, self.folder)
                    if unreadable:
                        self.err((*path, "queries", "file"), f"pipeline.indexes.{name}.queries.file: {unreadable}")

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

        for s in self.pipeline.stages:
            if s.name not in state:
                visit(s.name, [])


def check_pipeline(m: ManifestView, doc: Document, folder: Path) -> list[Diagnostic]:
    return _Checker(m, doc, folder).check() if m.pipeline is not None else []
