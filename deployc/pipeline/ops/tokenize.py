"""`tokenize`: text -> input_ids and attention_mask [1, tokens] with one of the pipeline's tokenizers."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import Field

from deployc.core.layout import tokenizer_file
from deployc.pipeline.ops.base import Checks, ConfigContext, Host, OpBase, StageBase
from deployc.pipeline.ops.model import ModelStage
from deployc.pipeline.ports import TEXT, Port

if TYPE_CHECKING:
    from deployc.pipeline.manifest_view import ManifestView


class TokenizeStage(StageBase):
    op: Literal["tokenize"]
    tokenizer: str
    input: str
    max_length: Annotated[int, Field(ge=2, le=100_000)] = 128


class TokenizeOp(OpBase):
    name = "tokenize"
    schema = TokenizeStage
    reads = ("input",)
    wiring = frozenset({"tokenizer"})

    def outputs(self, stage: TokenizeStage, manifest: ManifestView, folder: Path | None) -> dict[str, Port]:
        tokens = Port("tensor", "int64", (1, "tokens"))
        return {"input_ids": tokens, "attention_mask": tokens}

    def check(self, stage: TokenizeStage, c: Checks) -> None:
        c.known(stage, "tokenizer", "tokenizer", stage.tokenizer, c.pipeline.tokenizers)
        c.expect(stage, "input", c.port(stage, "input", stage.input), TEXT)

    def params(self, stage: TokenizeStage, context: ConfigContext) -> dict[str, Any]:
        params = super().params(stage, context)
        pad_to = _pad_to(stage, context)
        if pad_to:
            params["pad_to"] = pad_to
        pipeline = context.manifest.pipeline
        assert pipeline is not None
        params["tokenizer"] = tokenizer_file(stage.tokenizer, pipeline.tokenizers[stage.tokenizer].is_sentencepiece())
        return params

    def run(self, stage: dict[str, Any], args: dict[str, Any], params: dict[str, Any], host: Host) -> dict[str, Any]:
        from deployc.pipeline.host.tokenizers import encode

        ids, mask = encode(host.tokenizer(params["tokenizer"], params["max_length"]), args["input"],
                           params.get("pad_to", 0))
        return {"input_ids": ids, "attention_mask": mask}


def _pad_to(stage: TokenizeStage, context: ConfigContext) -> int | None:
    """A tokenize stage feeding a model whose program takes a static number of tokens pads to it."""
    pipeline = context.manifest.pipeline
    assert pipeline is not None
    for consumer in pipeline.stages:
        if isinstance(consumer, ModelStage) and consumer.model in context.static_lengths and any(
                ref.split(".")[0] == stage.name for ref in consumer.inputs.values()):
            return context.static_lengths[consumer.model]
    return None


OP = TokenizeOp()
