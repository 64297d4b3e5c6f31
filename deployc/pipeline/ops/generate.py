"""`generate`: a text-generation model's answer to a prompt: the prompt tokenized, prefilled in one call,
then one call per new token (greedy, or seeded temperature/top-p sampling), decoded to text."""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import Field

from deployc.core.layout import tokenizer_file
from deployc.pipeline import chat_template
from deployc.pipeline.asset_sources import tokenizer_file as tokenizer_asset_file
from deployc.pipeline.chat_template import ChatFrame, ChatTemplateProblem
from deployc.pipeline.declarations import TokenizerAsset
from deployc.pipeline.ops.base import Checks, ConfigContext, Host, OpBase, StageBase
from deployc.pipeline.ports import TEXT, Port

if TYPE_CHECKING:
    from deployc.pipeline.manifest_view import ManifestView


class GenerateStage(StageBase):
    op: Literal["generate"]
    model: str
    tokenizer: str
    prompt: str
    max_new_tokens: Annotated[int, Field(ge=1, le=4096)] = 32
    temperature: Annotated[float, Field(ge=0.0, le=10.0)] = 0.0
    top_p: Annotated[float, Field(gt=0.0, le=1.0)] = 1.0
    seed: int = 0
    stop: list[str] = Field(default_factory=list, description="stop strings, besides the model's eos_ids")
    chat: bool | None = Field(default=None, description="frame the prompt as a user's message with the model's "
                                                         "chat template (its tokenizer's files): true requires "
                                                         "one, false sends the prompt as it is; default: when the "
                                                         "tokenizer has one")
    system: str | None = Field(default=None, description="the conversation's system message (default: the chat "
                                                         "template's own)")


# The model's constants the runtime needs to drive it, copied into the stage's parameters.
CONSTANTS = ("bos_id", "eos_ids", "max_seq_len", "vocab_size")


class GenerateOp(OpBase):
    name = "generate"
    schema = GenerateStage
    reads = ("prompt",)
    wiring = frozenset({"model", "tokenizer"})

    def outputs(self, stage: GenerateStage, manifest: ManifestView, folder: Path | None) -> dict[str, Port]:
        return {"text": TEXT, "tokens": Port("tensor", "int64", (1, "generated"))}

    def program(self, stage: GenerateStage) -> tuple[str, str]:
        return stage.model, "forward"

    def check(self, stage: GenerateStage, c: Checks) -> None:
        if c.known(stage, "model", "model", stage.model, c.manifest.models):
            spec = c.manifest.models[stage.model]
            if spec.task != "text-generation":
                c.error(stage, "model", f"model '{stage.model}' must have task: text-generation")
            for needed in ("max_seq_len", "eos_ids"):
                if needed not in spec.constants:
                    c.error(stage, "model", f"model '{stage.model}' must declare constants.{needed}")
            if set(spec.inputs) != {"tokens", "input_pos"}:
                c.error(stage, "model", "a text-generation model takes exactly the inputs tokens [1, seq] and "
                        "input_pos [seq]")
        if c.known(stage, "tokenizer", "tokenizer", stage.tokenizer, c.pipeline.tokenizers):
            try:
                chat_frame(stage, c.pipeline.tokenizers[stage.tokenizer], c.folder)
            except ChatTemplateProblem as exc:
                c.error(stage, "chat" if stage.chat is not None else "tokenizer", f"{exc}",
                        "set chat: false to send the prompt as it is")
        c.expect(stage, "prompt", c.port(stage, "prompt", stage.prompt), TEXT)

    def params(self, stage: GenerateStage, context: ConfigContext) -> dict[str, Any]:
        pipeline = context.manifest.pipeline
        assert pipeline is not None
        constants = dict(context.manifest.models[stage.model].constants)
        if stage.model in context.contexts:  # a decoder in the static form: the context it was built with
            constants["max_seq_len"] = context.contexts[stage.model]
        params = {**super().params(stage, context),
                  "tokenizer": tokenizer_file(stage.tokenizer, pipeline.tokenizers[stage.tokenizer].is_sentencepiece()),
                  **{k: constants[k] for k in CONSTANTS if k in constants}}
        framed = chat_frame(stage, pipeline.tokenizers[stage.tokenizer], context.folder)
        if framed is not None:  # the template writes the special tokens it wants: no bos of deployc's own
            params.pop("bos_id", None)
            params.update(chat_prefix=framed.prefix, chat_suffix=framed.suffix)
        for field in ("chat", "system"):  # what made the frame is in it
            params.pop(field, None)
        return params

    def run(self, stage: dict[str, Any], args: dict[str, Any], params: dict[str, Any], host: Host) -> dict[str, Any]:
        import numpy as np

        from deployc.pipeline.host.generation import frame_tokens, generate, prompt_room
        from deployc.pipeline.ops.template import as_text

        tk = host.tokenizer(params["tokenizer"], None)
        prefix, suffix = params.get("chat_prefix", ""), params.get("chat_suffix", "")
        ids = tk.encode(prefix + as_text(args["prompt"]) + suffix, add_special_tokens=False).ids
        if "bos_id" in params:
            ids = [params["bos_id"], *ids]
        frame = frame_tokens(ids, [params["bos_id"]] if "bos_id" in params else [],
                             tk.encode(prefix, add_special_tokens=False).ids if prefix else [],
                             tk.encode(suffix, add_special_tokens=False).ids if suffix else [])
        stops = params.get("stop", [])
        calls: list[float] = []  # when each decoder call began: the second one follows the first token
        prefill: list[float] = []  # the first call's seconds

        def step(tokens: np.ndarray, positions: np.ndarray) -> np.ndarray:
            calls.append(time.perf_counter())
            logits = host.call(stage["program"], [tokens, positions])[0]
            if len(calls) == 1:
                prefill.append(time.perf_counter() - calls[0])
            return logits

        def stopped(out: list[int]) -> bool:
            text = tk.decode(out)
            return any(s in text for s in stops)

        start = time.perf_counter()
        new = generate(step, ids, params["max_new_tokens"], params["max_seq_len"], params.get("eos_ids", []),
                       params["temperature"], params["top_p"], params["seed"], stopped if stops else None, frame)
        end = time.perf_counter()
        first = (calls[1] if len(calls) > 1 else end) - start
        room = prompt_room(params["max_new_tokens"], params["max_seq_len"])
        per_token = (end - calls[1]) * 1000 / (len(calls) - 1) if len(calls) > 1 else 0.0
        prompt_tokens, prefill_ms = min(len(ids), room), prefill[0] * 1000
        host.note({"prompt_tokens": prompt_tokens, "tokens": len(new), "first_token_ms": round(first * 1000, 3),
                   "per_token_ms": round(per_token, 3), "prefill_ms": round(prefill_ms, 3),
                   "prefill_tokens_per_s": round(1000 * prompt_tokens / prefill_ms, 1) if prefill_ms > 0 else 0.0,
                   "decode_tokens_per_s": round(1000 / per_token, 1) if per_token > 0 else 0.0})
        text = tk.decode(new)
        for s in stops:
            text = text.split(s)[0]
        return {"text": text, "tokens": np.asarray([new], dtype=np.int64)}


def chat_frame(stage: GenerateStage, asset: TokenizerAsset, folder: Path) -> ChatFrame | None:
    """The prefix and suffix the stage's prompt gets from the tokenizer's chat template; None without one."""
    if stage.chat is False:
        return None
    found = tokenizer_asset_file(asset, folder)
    template = chat_template.read(found) if found is not None and not asset.is_sentencepiece() else None
    if template is None:
        if stage.chat:
            raise ChatTemplateProblem(f"the tokenizer '{stage.tokenizer}' has no chat template")
        return None
    return chat_template.frame(template, stage.system)


OP = GenerateOp()
