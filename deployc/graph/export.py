"""torch.export with the manifest's dims, and export failures turned into a message plus a hint."""

from __future__ import annotations

from typing import Any

import torch

from deployc.core.dims import DimPlan
from deployc.core.errors import BuildError
from deployc.graph import fourier, unfold
from deployc.graph.dims import BLOCKS, explain_rejected_dims
from deployc.plan.build_plan import InputPlan

_HINTS = (
    ("data-dependent", "the model branches on tensor values; make the branch static or use torch.cond"),
    ("GuardOnDataDependentSymNode", "the model branches on tensor values; make the branch static or use torch.cond"),
    ("specialized", "model code forced a dynamic dim to one value; make that dim static in the manifest or "
                    "remove the size-dependent code"),
    ("Constraints violated", "a declared dim range does not hold for the model; narrow dims.min/max or make it static"),
    ("not supported", "an operation cannot be traced by torch.export; rewrite it or move it outside the model"),
)


class MethodModule(torch.nn.Module):
    """Exports a further method of a model as a program method (torch.export traces `forward`)."""

    def __init__(self, model: torch.nn.Module, function: str) -> None:
        super().__init__()
        self.model, self.function = model, function

    def forward(self, *args: Any) -> Any:
        return getattr(self.model, self.function)(*args)




def _symbol(d: DimPlan) -> Any:
    if d.multiple_of == 1:
        return torch.export.Dim(d.name, min=d.min, max=d.max)
    k = d.multiple_of
    return k * torch.export.Dim(d.name + BLOCKS, min=d.min // k, max=d.max // k)


def dynamic_shapes(inputs: list[InputPlan], dims: list[DimPlan], by_name: bool) -> Any:
    """torch.export's dynamic_shapes: keyed by argument name, or (for a *args wrapper) one tuple."""
    if not dims:
        return None
    symbols = {d.name: _symbol(d) for d in dims if d.max > d.min}
    specs = [{i: symbols[s] for i, s in enumerate(inp.shape) if isinstance(s, str) and s in symbols} or None
             for inp in inputs]
    return {inp.name: spec for inp, spec in zip(inputs, specs)} if by_name else (tuple(specs),)


def export_model(model: torch.nn.Module, example: list[torch.Tensor], inputs: list[InputPlan], dims: list[DimPlan],
                 by_name: bool = True) -> torch.export.ExportedProgram:
    try:
        shapes = dynamic_shapes(inputs, dims, by_name)
        ep = torch.export.export(model, tuple(example), dynamic_shapes=shapes, strict=False)
        # An unfold as slices, an FFT's real part as matmuls: ATen ops, for every backend after.
        if unfold.has_im2col(ep.graph) or fourier.has_real_fft(ep.graph):
            module = ep.module(check_guards=False)
            replaced = unfold.im2col_as_slices(module) + fourier.real_ffts_as_matmuls(module)
            if replaced:
                ep = torch.export.export(module, tuple(example), dynamic_shapes=shapes, strict=False)
        return ep
    except Exception as exc:  # torch.export raises many types; all become a located build failure
        text = str(exc).strip()
        rejected = explain_rejected_dims(text, dims)
        if rejected is not None:
            raise rejected from exc
        first = next((line for line in text.splitlines() if line.strip()), type(exc).__name__)
        hint = next((h for needle, h in _HINTS if needle in text), None)
        message = f"torch.export failed: {type(exc).__name__}: {first[:400]}"
        raise BuildError(message + (f" (hint: {hint})" if hint else "")) from exc

