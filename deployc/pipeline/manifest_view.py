"""What the pipeline reads of a manifest: the models its stages call and its own `pipeline:` section.

The manifest schema (deployc/load/manifest.py) holds the pipeline's schema, and the pipeline's schema holds
every op's: so ops and checks say here what they read instead of importing either, and `Manifest` and
`Pipeline` fit these shapes (mypy checks it where one is passed)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from deployc.pipeline.declarations import IndexAsset, PipelineInput, TokenizerAsset


class TensorView(Protocol):
    """A model input or output: its shape (sizes, or names of the model's dims) and dtype."""

    @property
    def shape(self) -> Sequence[int | str]: ...

    @property
    def dtype(self) -> str: ...


class DimView(Protocol):
    @property
    def max(self) -> int: ...

    @property
    def multiple_of(self) -> int | None: ...

    def bounds(self) -> tuple[int, int]: ...


class MethodView(Protocol):
    @property
    def inputs(self) -> Mapping[str, TensorView]: ...

    @property
    def outputs(self) -> Mapping[str, TensorView]: ...


class ModelView(MethodView, Protocol):
    """A model: its forward's inputs and outputs, its further methods, dims, constants and task."""

    @property
    def task(self) -> str: ...

    @property
    def methods(self) -> Mapping[str, MethodView]: ...

    @property
    def dims(self) -> Mapping[str, DimView]: ...

    @property
    def constants(self) -> Mapping[str, object]: ...


class PipelineView(Protocol):
    """The `pipeline:` section (pipeline/schema.py's `Pipeline`, which holds every op's stage schema)."""

    @property
    def inputs(self) -> Mapping[str, PipelineInput]: ...

    @property
    def outputs(self) -> Mapping[str, str]: ...

    @property
    def stages(self) -> Sequence[Any]: ...  # each op's own stage record

    @property
    def tokenizers(self) -> Mapping[str, TokenizerAsset]: ...

    @property
    def indexes(self) -> Mapping[str, IndexAsset]: ...


class ManifestView(Protocol):
    @property
    def models(self) -> Mapping[str, ModelView]: ...

    @property
    def pipeline(self) -> PipelineView | None: ...
