"""The pipeline as a dataflow graph: ports and their types, the references between stages, an order
to run them in. Pure Python; validate, plan and packaging read it.

A reference is either a pipeline input name (`query`) or `stage.port`. Port types: text, image and
audio (files given to the pipeline), chunks (retrieved passages), or a tensor (dtype, shape) with
symbolic sizes.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from deployc.load.manifest import (
    AudioStage,
    GenerateStage,
    ImageStage,
    Manifest,
    ModelSpec,
    ModelStage,
    Pipeline,
    SimilarityStage,
    TemplateStage,
    TokenizeStage,
    VectorSearchStage,
)
from deployc.pipeline.preprocessing import (
    audio_shape,
    audio_steps,
    image_shape,
    image_steps,
)


@dataclass(frozen=True)
class Port:
    kind: str  # text | image | audio | chunks | tensor
    dtype: str = ""
    shape: tuple[int | str, ...] = ()

    def __str__(self) -> str:
        if self.kind != "tensor":
            return self.kind
        return f"tensor {self.dtype}[{', '.join(map(str, self.shape))}]"


TEXT, CHUNKS = Port("text"), Port("chunks")


def signature(spec: ModelSpec, method: str) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """(inputs, outputs) of one of the model's methods; None when it has no such method."""
    if method == "forward":
        return spec.inputs, spec.outputs
    m = spec.methods.get(method)
    return (m.inputs, m.outputs) if m else None


def model_output_ports(spec: ModelSpec, method: str = "forward") -> dict[str, Port]:
    sig = signature(spec, method)
    return {n: Port("tensor", o.dtype, tuple(o.shape)) for n, o in sig[1].items()} if sig else {}


def stage_outputs(stage: Any, manifest: Manifest, folder: Path | None = None) -> dict[str, Port]:
    """The stage's output ports. `folder` (the manifest's) lets an image or audio stage read its
    preprocessor config for static sizes; without it they stay symbolic."""
    if isinstance(stage, ImageStage):
        steps = image_steps(stage, folder)[0] if folder is not None else [{"op": "layout", "layout": stage.layout}]
        return {"pixels": Port("tensor", "float32", image_shape(steps))}
    if isinstance(stage, AudioStage):
        steps = audio_steps(stage, folder)[0] if folder is not None else []
        return {"features": Port("tensor", "float32", audio_shape(steps))}
    if isinstance(stage, SimilarityStage):
        return {"scores": Port("tensor", "float32", ("candidates",)),
                "top": Port("tensor", "int64", (stage.top_k,))}
    if isinstance(stage, TokenizeStage):
        tokens = Port("tensor", "int64", (1, "tokens"))
        return {"input_ids": tokens, "attention_mask": tokens}
    if isinstance(stage, ModelStage):
        spec = manifest.models.get(stage.model)
        return model_output_ports(spec, stage.method) if spec else {}
    if isinstance(stage, VectorSearchStage):
        return {"chunks": CHUNKS, "text": TEXT, "scores": Port("tensor", "float32", (stage.top_k,))}
    if isinstance(stage, TemplateStage):
        return {"text": TEXT}
    if isinstance(stage, GenerateStage):
        return {"text": TEXT, "tokens": Port("tensor", "int64", (1, "generated"))}
    return {}


def references(stage: Any) -> dict[str, str]:
    """field path (for locating errors) -> the reference it holds."""
    if isinstance(stage, (ModelStage, TemplateStage)):
        return {f"inputs.{k}": v for k, v in stage.inputs.items()}
    if isinstance(stage, (TokenizeStage, ImageStage, AudioStage)):
        return {"input": stage.input}
    if isinstance(stage, SimilarityStage):
        return {"a": stage.a, "b": stage.b}
    if isinstance(stage, VectorSearchStage):
        return {"query": stage.query}
    if isinstance(stage, GenerateStage):
        return {"prompt": stage.prompt}
    return {}


def order(pipeline: Pipeline) -> list[Any]:
    """Stages in an order where every stage comes after the stages it reads (assumes no cycle)."""
    by_name = {s.name: s for s in pipeline.stages}
    done: list[Any] = []
    seen: set[str] = set()

    def visit(name: str) -> None:
        if name in seen or name not in by_name:
            return
        seen.add(name)
        for ref in references(by_name[name]).values():
            visit(ref.split(".")[0])
        done.append(by_name[name])

    for s in pipeline.stages:
        visit(s.name)
    return done
