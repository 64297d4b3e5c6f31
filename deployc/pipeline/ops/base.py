"""What every pipeline op module provides, and the defaults most ops take.

An op is one module in this package defining `OP`: the stage's schema (a `StageBase` subclass whose `op`
field is a Literal of the op's name), the references it reads (for the dataflow graph), the ports it
makes, its validate-time checks, the parameters the runtime config carries for it, any further file it
reads (hashed by the plan), and its execution on this host (`run`, numpy imported there: validate and
plan import every op module). The native runner implements `run` once more, in one function
(native/src/ops.cpp); conformance vectors (tests/conformance/) hold both to the same outputs.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from deployc.core.records import Frozen, Identifier
from deployc.pipeline.ports import Port

if TYPE_CHECKING:
    from deployc.pipeline.manifest_view import ManifestView, PipelineView


class StageBase(Frozen):
    name: Identifier
    op: str  # each op's schema narrows it to its name (the discriminator)


class Checks(Protocol):
    """What an op's `check` may use: the manifest, and located errors about the stage's own fields."""

    manifest: ManifestView
    pipeline: PipelineView
    folder: Path
    stages: dict[str, Any]  # by name

    def error(self, stage: Any, field: str, message: str, hint: str | None = None, key: bool = False) -> None:
        """An error at `field` of `stage`, its message prefixed with the field's place in the manifest."""

    def port(self, stage: Any, field: str, ref: str) -> Port | None:
        """What `ref` (at `field`) names: a pipeline input or a stage's output; None (reported) when nothing."""

    def expect(self, stage: Any, field: str, got: Port | None, want: Port) -> None:
        """Reports a type or shape mismatch between what `field` gets and what it takes."""

    def known(self, stage: Any, field: str, kind: str, name: str, table: Mapping[str, Any]) -> bool:
        """Whether `name` is in `table` (a model, tokenizer or index); reported with a suggestion when not."""

    def token_lengths(self, stage: Any, field: str, ref: str, model: str, shape: Sequence[int | str],
                      port: str) -> None:
        """A tokenize stage feeding a model input must fit the model's token dim."""


@dataclass(frozen=True)
class ConfigContext:
    """What an op's runtime-config parameters may depend on."""

    manifest: ManifestView
    folder: Path  # the manifest's: preprocessor configs are read from it
    static_lengths: dict[str, int]  # model -> the token count its program on this target takes exactly
    # decoder -> the positions its program on this target holds (its static form's context)
    contexts: dict[str, int] = dataclasses.field(default_factory=dict)


class Host(Protocol):
    """What an op's `run` may use on this host: the bundle's resources, loaded once."""

    folder: Path  # the bundle directory (for messages)

    def tokenizer(self, file: str, max_length: int | None) -> Any: ...

    def index(self, file: str) -> tuple[dict[str, Any], Any]:
        """An index asset: its JSON (chunks, dim) and its vectors [count, dim] float32."""
        ...

    def signature(self, program: str, method: str) -> dict[str, Any]:
        """The runtime config's entry of a program's method: inputs and outputs with names."""
        ...

    def call(self, program: str, tensors: list[Any], method: str = "forward") -> list[Any]: ...

    def note(self, figures: dict[str, Any]) -> None:
        """Figures a stage reports beside its outputs (a generate stage's token counts and times)."""


class OpBase:
    """Defaults: no program, references in the fields `reads` names, parameters = the stage's fields but
    its wiring (name, op, references, and what `wiring` adds), no checks, no files."""

    name: ClassVar[str]
    schema: ClassVar[type[StageBase]]
    reads: ClassVar[tuple[str, ...]] = ()  # fields holding a reference (a str) or a mapping of them (port -> ref)
    wiring: ClassVar[frozenset[str]] = frozenset()  # further fields that are not runtime parameters
    paths: ClassVar[tuple[str, ...]] = ()  # fields naming a file relative to the manifest (checked at validate)

    def references(self, stage: Any) -> dict[str, str]:
        """Field path (for locating errors) -> the reference it holds, in the order the stage reads them."""
        out: dict[str, str] = {}
        for field in self.reads:
            value = getattr(stage, field)
            if isinstance(value, dict):
                out.update({f"{field}.{k}": v for k, v in value.items()})
            else:
                out[field] = value
        return out

    def outputs(self, stage: Any, manifest: ManifestView, folder: Path | None) -> dict[str, Port]:
        """The stage's output ports. `folder` (the manifest's) lets an op read a config for static sizes;
        without it they may stay symbolic."""
        return {}

    def program(self, stage: Any) -> tuple[str, str]:
        """(model, method) whose program the stage calls; ("", "") for built-in ops."""
        return "", ""

    def check(self, stage: Any, checks: Checks) -> None:
        """Validate-time checks of the stage's own fields; graph-wide ones (names, cycles, unused stages)
        are the pipeline's."""

    def files(self, stage: Any, folder: Path) -> list[Path]:
        """Files besides the manifest the op reads at plan time (their content decides the bundle)."""
        return []

    def params(self, stage: Any, context: ConfigContext) -> dict[str, Any]:
        """The op's parameters in the runtime config (params_json)."""
        exclude = {"name", "op", *self.reads, *self.wiring}
        return stage.model_dump(mode="json", exclude=exclude)

    def run(self, stage: dict[str, Any], args: dict[str, Any], params: dict[str, Any], host: Host) -> dict[str, Any]:
        """Execute the stage on this host: its inputs by port name -> its outputs by port name."""
        raise NotImplementedError(self.name)


class PreprocessingOp(OpBase):
    """An op that decodes a file input (`input`) into one float32 tensor through steps resolved at plan time
    from the stage and its `preprocessor` config: image, audio."""

    reads = ("input",)
    paths = ("preprocessor",)
    kind: ClassVar[str]  # the pipeline input type it reads
    port: ClassVar[str]  # its one output

    def resolve_steps(self, stage: Any, folder: Path) -> tuple[list[dict[str, Any]], list[tuple[str, str]]]:
        raise NotImplementedError(self.name)

    def shape(self, steps: list[dict[str, Any]] | None, stage: Any) -> tuple[int | str, ...]:
        """The output's shape from the steps (None: no folder to read a config from; symbolic sizes)."""
        raise NotImplementedError(self.name)

    def prepare(self, data: bytes, steps: list[dict[str, Any]]) -> Any:
        raise NotImplementedError(self.name)

    def outputs(self, stage: Any, manifest: ManifestView, folder: Path | None) -> dict[str, Port]:
        steps = self.resolve_steps(stage, folder)[0] if folder is not None else None
        return {self.port: Port("tensor", "float32", self.shape(steps, stage))}

    def check(self, stage: Any, checks: Checks) -> None:
        checks.expect(stage, "input", checks.port(stage, "input", stage.input), Port(self.kind))
        for field, message in self.resolve_steps(stage, checks.folder)[1]:
            checks.error(stage, field, message)

    def files(self, stage: Any, folder: Path) -> list[Path]:
        return [folder / stage.preprocessor] if stage.preprocessor else []

    def params(self, stage: Any, context: ConfigContext) -> dict[str, Any]:
        return {"steps": self.resolve_steps(stage, context.folder)[0]}  # the preprocessor config folded in

    def run(self, stage: dict[str, Any], args: dict[str, Any], params: dict[str, Any], host: Host) -> dict[str, Any]:
        return {self.port: self.prepare(args["input"], params["steps"])}
