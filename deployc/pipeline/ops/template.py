"""`template`: text with {name} placeholders filled from other stages (text, or retrieved chunks)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field

from deployc.core.records import Identifier
from deployc.pipeline.ops.base import Checks, Host, OpBase, StageBase
from deployc.pipeline.ports import TEXT, Port

if TYPE_CHECKING:
    from deployc.pipeline.manifest_view import ManifestView

_PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")


class TemplateStage(StageBase):
    op: Literal["template"]
    template: str = Field(description="text with {name} placeholders, one per entry of `inputs`")
    inputs: dict[Identifier, str] = Field(default_factory=dict)


def as_text(value: Any) -> str:
    """Text as it is; retrieved chunks as their texts, a blank line between them."""
    if isinstance(value, list):
        return "\n\n".join(c["text"] for c in value)
    return str(value)


class TemplateOp(OpBase):
    name = "template"
    schema = TemplateStage
    reads = ("inputs",)

    def outputs(self, stage: TemplateStage, manifest: ManifestView, folder: Path | None) -> dict[str, Port]:
        return {"text": TEXT}

    def check(self, stage: TemplateStage, c: Checks) -> None:
        placeholders = set(_PLACEHOLDER.findall(stage.template))
        for port, ref in stage.inputs.items():
            field = f"inputs.{port}"
            got = c.port(stage, field, ref)
            if got is not None and got.kind == "tensor":
                c.error(stage, field, f"type mismatch: gets {got}, expects text or chunks")
            if port not in placeholders:
                c.error(stage, field, f"the template has no {{{port}}} placeholder", key=True)
        for missing in sorted(placeholders - set(stage.inputs)):
            c.error(stage, "template", f"placeholder {{{missing}}} has no entry under inputs")

    def run(self, stage: dict[str, Any], args: dict[str, Any], params: dict[str, Any], host: Host) -> dict[str, Any]:
        return {"text": fill(params["template"], {k: as_text(v) for k, v in args.items()})}


def fill(template: str, values: dict[str, str]) -> str:
    """Each `{name}` with a value replaced by it, in one pass: inserted text is never scanned again, and
    every other character (other braces included) stays as written."""
    return _PLACEHOLDER.sub(lambda m: values.get(m.group(1), m.group(0)), template)


OP = TemplateOp()
