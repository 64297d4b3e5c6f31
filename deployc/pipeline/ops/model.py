"""`model`: call one method of one of the manifest's models with tensors from other stages."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field

from deployc.core.records import Identifier
from deployc.pipeline.ops.base import Checks, Host, OpBase, StageBase
from deployc.pipeline.ports import Port

if TYPE_CHECKING:
    from deployc.pipeline.manifest_view import ManifestView, ModelView, TensorView


class ModelStage(StageBase):
    op: Literal["model"]
    model: str
    method: str = "forward"
    inputs: dict[Identifier, str] = Field(description="model input name -> 'stage.port' or a pipeline input")


def signature(spec: ModelView, method: str) -> tuple[Mapping[str, TensorView], Mapping[str, TensorView]] | None:
    """(inputs, outputs) of one of the model's methods; None when it has no such method."""
    if method == "forward":
        return spec.inputs, spec.outputs
    m = spec.methods.get(method)
    return (m.inputs, m.outputs) if m else None


def output_ports(spec: ModelView, method: str = "forward") -> dict[str, Port]:
    sig = signature(spec, method)
    return {n: Port("tensor", o.dtype, tuple(o.shape)) for n, o in sig[1].items()} if sig else {}


class ModelOp(OpBase):
    name = "model"
    schema = ModelStage
    reads = ("inputs",)
    wiring = frozenset({"model", "method"})

    def outputs(self, stage: ModelStage, manifest: ManifestView, folder: Path | None) -> dict[str, Port]:
        spec = manifest.models.get(stage.model)
        return output_ports(spec, stage.method) if spec else {}

    def program(self, stage: ModelStage) -> tuple[str, str]:
        return stage.model, stage.method

    def check(self, stage: ModelStage, c: Checks) -> None:
        from deployc.core.diagnostics import closest

        if not c.known(stage, "model", "model", stage.model, c.manifest.models):
            return
        spec = c.manifest.models[stage.model]
        sig = signature(spec, stage.method)
        if sig is None:
            c.error(stage, "method", f"model '{stage.model}' has no method '{stage.method}'",
                    closest(stage.method, ["forward", *spec.methods]))
            return
        inputs, outputs = sig
        if not outputs:
            c.error(stage, "model", f"model '{stage.model}' must declare the `outputs` of {stage.method} to be used "
                    "in a pipeline")
        missing = [n for n in inputs if n not in stage.inputs]
        if missing:
            c.error(stage, "inputs", f"model '{stage.model}' needs inputs {', '.join(missing)}", key=True)
        for port, ref in stage.inputs.items():
            field = f"inputs.{port}"
            got = c.port(stage, field, ref)
            if port not in inputs:
                c.error(stage, field, f"model '{stage.model}' has no input '{port}'", closest(port, inputs), key=True)
                continue
            want = inputs[port]
            c.expect(stage, field, got, Port("tensor", want.dtype, tuple(want.shape)))
            c.token_lengths(stage, field, ref, stage.model, want.shape, port)

    def run(self, stage: dict[str, Any], args: dict[str, Any], params: dict[str, Any], host: Host) -> dict[str, Any]:
        signature = host.signature(stage["program"], stage["method"])
        outs = host.call(stage["program"], [args[i["name"]] for i in signature["inputs"]], stage["method"])
        return {o["name"]: v for o, v in zip(signature["outputs"], outs)}


OP = ModelOp()
