"""torch.export with the manifest's dims, and export failures turned into a message plus a hint."""

from __future__ import annotations

from typing import Any

import torch

from deployc.errors import BuildError
from deployc.plan import Export

_HINTS = (
    ("data-dependent", "the model branches on tensor values; make the branch static or use torch.cond"),
    ("GuardOnDataDependentSymNode", "the model branches on tensor values; make the branch static or use torch.cond"),
    ("specialized", "model code forced a dynamic dim to one value; make that dim static in the manifest or "
                    "remove the size-dependent code"),
    ("Constraints violated", "a declared dim range does not hold for the model; narrow dims.min/max or make it static"),
    ("not supported", "an operation cannot be traced by torch.export; rewrite it or move it outside the model"),
)


def dynamic_shapes(step: Export) -> dict[str, Any] | None:
    if not step.dims:
        return None
    dims = {d.name: torch.export.Dim(d.name, min=d.min, max=d.max) for d in step.dims if d.max > d.min}
    spec: dict[str, Any] = {}
    for inp in step.inputs:
        spec[inp.name] = {i: dims[s] for i, s in enumerate(inp.shape) if isinstance(s, str) and s in dims} or None
    return spec


def export_model(model: torch.nn.Module, example: list[torch.Tensor], step: Export) -> torch.export.ExportedProgram:
    try:
        return torch.export.export(model, tuple(example), dynamic_shapes=dynamic_shapes(step), strict=False)
    except Exception as exc:  # torch.export raises many types; all become a located build failure
        text = str(exc).strip()
        first = next((line for line in text.splitlines() if line.strip()), type(exc).__name__)
        hint = next((h for needle, h in _HINTS if needle in text), None)
        message = f"torch.export failed: {type(exc).__name__}: {first[:400]}"
        raise BuildError(message + (f" (hint: {hint})" if hint else "")) from exc
