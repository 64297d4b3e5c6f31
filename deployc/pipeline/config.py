"""The pipeline as the bundle's runtime config describes it: stages in execution order, wired by
name, each with its op's parameters and the bundle paths of its assets. Made at plan time (pure);
packaging writes it into runtime.bin and the host and native runtimes execute it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from deployc.core.layout import index_file, tokenizer_file
from deployc.core.records import Frozen
from deployc.load.manifest import (
    AudioStage,
    GenerateStage,
    ImageStage,
    Manifest,
    ModelStage,
    TokenizeStage,
    VectorSearchStage,
)
from deployc.pipeline.dataflow import order, references, stage_outputs
from deployc.pipeline.preprocessing import audio_steps, image_steps

_WIRING = {"op", "name", "model", "method", "inputs", "input", "query", "prompt", "tokenizer", "index", "a", "b"}


class StageConfig(Frozen):
    name: str
    op: str
    program: str  # the model whose program the stage calls; "" for built-in ops
    method: str
    inputs: list[str]  # "port=reference"
    outputs: list[str]
    params: dict[str, Any]


class PipelineConfig(Frozen):
    inputs: list[str]
    input_types: list[str]  # per input: text (a string), image (PNG/JPEG bytes), audio (WAV bytes)
    outputs: list[str]  # "name=stage.port"
    stages: list[StageConfig]


def _params(stage: Any, m: Manifest, pad_to: int | None, folder: Path) -> dict[str, Any]:
    if isinstance(stage, ImageStage):  # the resolved steps, the preprocessor config folded in
        return {"steps": image_steps(stage, folder)[0]}
    if isinstance(stage, AudioStage):
        return {"steps": audio_steps(stage, folder)[0]}
    params = stage.model_dump(mode="json", exclude=_WIRING)
    if pad_to:
        params["pad_to"] = pad_to
    if isinstance(stage, (TokenizeStage, GenerateStage)):
        assert m.pipeline is not None
        params["tokenizer"] = tokenizer_file(stage.tokenizer, m.pipeline.tokenizers[stage.tokenizer].is_sentencepiece())
    if isinstance(stage, VectorSearchStage):
        params["index"] = index_file(stage.index)
    if isinstance(stage, GenerateStage):
        c = m.models[stage.model].constants
        params.update({k: c[k] for k in ("bos_id", "eos_ids", "max_seq_len", "vocab_size") if k in c})
    return params


def _pad_to(stage: Any, p: Any, static_lengths: dict[str, int]) -> int | None:
    """A tokenize stage feeding a model whose program takes a static number of tokens pads to it."""
    if not isinstance(stage, TokenizeStage):
        return None
    for consumer in p.stages:
        if isinstance(consumer, ModelStage) and consumer.model in static_lengths and any(
                ref.split(".")[0] == stage.name for ref in consumer.inputs.values()):
            return static_lengths[consumer.model]
    return None


def pipeline_config(m: Manifest, folder: Path, static_lengths: dict[str, int] | None = None) -> PipelineConfig | None:
    """`folder`: the manifest's (preprocessor configs are read from it); `static_lengths`: model -> the
    token count its program on this target takes exactly."""
    p = m.pipeline
    if p is None:
        return None
    stages = []
    for s in order(p):
        stages.append(StageConfig(
            name=s.name, op=s.op,
            program=s.model if isinstance(s, (ModelStage, GenerateStage)) else "",
            method=s.method if isinstance(s, ModelStage) else ("forward" if isinstance(s, GenerateStage) else ""),
            inputs=[f"{field.split('.')[-1]}={ref}" for field, ref in references(s).items()],
            outputs=list(stage_outputs(s, m)),
            params=_params(s, m, _pad_to(s, p, static_lengths or {}), folder)))
    return PipelineConfig(inputs=list(p.inputs), input_types=[i.type for i in p.inputs.values()],
                          outputs=[f"{k}={v}" for k, v in p.outputs.items()], stages=stages)
