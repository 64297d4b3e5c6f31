"""The pipeline as the bundle's runtime config describes it: stages in execution order, wired by
name, each with its op's parameters and the bundle paths of its assets. Made at plan time (pure);
packaging writes it into runtime.bin and the host and native runtimes execute it."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from deployc.core.records import Frozen
from deployc.pipeline.graph import order, references, stage_outputs
from deployc.pipeline.ops import op_of
from deployc.pipeline.ops.base import ConfigContext

if TYPE_CHECKING:
    from deployc.pipeline.manifest_view import ManifestView


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


def pipeline_config(m: ManifestView, folder: Path, static_lengths: dict[str, int] | None = None,
                    contexts: dict[str, int] | None = None) -> PipelineConfig | None:
    """`folder`: the manifest's (preprocessor configs are read from it); `static_lengths`: model -> the
    token count its program on this target takes exactly; `contexts`: decoder -> the positions its
    program on this target holds, where that is not the model's constants.max_seq_len."""
    p = m.pipeline
    if p is None:
        return None
    context = ConfigContext(manifest=m, folder=folder, static_lengths=static_lengths or {}, contexts=contexts or {})
    stages = []
    for s in order(p):
        op = op_of(s)
        program, method = op.program(s)
        stages.append(StageConfig(
            name=s.name, op=s.op, program=program, method=method,
            inputs=[f"{field.split('.')[-1]}={ref}" for field, ref in references(s).items()],
            outputs=list(stage_outputs(s, m)), params=op.params(s, context)))
    return PipelineConfig(inputs=list(p.inputs), input_types=[i.type for i in p.inputs.values()],
                          outputs=[f"{k}={v}" for k, v in p.outputs.items()], stages=stages)
