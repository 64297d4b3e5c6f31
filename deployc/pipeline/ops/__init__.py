"""The pipeline op registry: one module per op, each an `Op` (ops/base.py), gathered in a plain dict whose
keys are the manifest's `op:` values. Adding an op is one new module in this package, one line in
`_MODULES`, and one function in the native runner's table (native/src/ops.cpp).

Nothing here imports numpy or torch: validate and plan read schemas, ports and checks; `run` imports what
it executes with.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, Union

from pydantic import Field

from deployc.pipeline.ops import (
    audio,
    generate,
    image,
    model,
    similarity,
    template,
    tokenize,
    vector_search,
)
from deployc.pipeline.ops.base import OpBase, StageBase

_MODULES = (  # the registry: one line per op module, in the order the schema lists them
    model,
    tokenize,
    vector_search,
    template,
    generate,
    image,
    audio,
    similarity,
)

OPS: dict[str, OpBase] = {m.OP.name: m.OP for m in _MODULES}

# A manifest's stage: the schema of the op its `op:` names (to the type checker: any op's stage).
if TYPE_CHECKING:
    Stage = StageBase
else:
    Stage = Annotated[Union[tuple(m.OP.schema for m in _MODULES)], Field(discriminator="op")]  # noqa: UP007


def op_of(stage: Any) -> OpBase:
    return OPS[stage.op]
