"""The manifest's `pipeline:` section: inputs, outputs, stages (each op's schema lives in its module,
deployc/pipeline/ops/) and the assets stages share (tokenizers, vector indexes: pipeline/declarations.py)."""

from __future__ import annotations

from pydantic import Field

from deployc.core.records import Frozen, Identifier
from deployc.pipeline.declarations import IndexAsset, PipelineInput, TokenizerAsset
from deployc.pipeline.ops import Stage


class Pipeline(Frozen):
    inputs: dict[Identifier, PipelineInput] = Field(min_length=1)
    outputs: dict[Identifier, str] = Field(min_length=1, description="name -> 'stage.port'")
    stages: list[Stage] = Field(min_length=1)
    tokenizers: dict[Identifier, TokenizerAsset] = Field(default_factory=dict)
    indexes: dict[Identifier, IndexAsset] = Field(default_factory=dict)
