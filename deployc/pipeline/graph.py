"""The pipeline as a dataflow graph: each stage's output ports and the references it reads (from its
op's module), and an order to run the stages in. Pure Python; validate, plan and packaging read it."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from deployc.pipeline.ops import op_of
from deployc.pipeline.ports import Port

if TYPE_CHECKING:
    from deployc.pipeline.manifest_view import ManifestView, PipelineView


def stage_outputs(stage: Any, manifest: ManifestView, folder: Path | None = None) -> dict[str, Port]:
    """The stage's output ports. `folder` (the manifest's) lets an image or audio stage read its
    preprocessor config for static sizes; without it they stay symbolic."""
    return op_of(stage).outputs(stage, manifest, folder)


def references(stage: Any) -> dict[str, str]:
    """field path (for locating errors) -> the reference it holds."""
    return op_of(stage).references(stage)


def order(pipeline: PipelineView) -> list[Any]:
    """Stages in an order where every stage comes after the stages it reads (assumes no cycle)."""
    by_name = {s.name: s for s in pipeline.stages}
    done: list[Any] = []
    seen: set[str] = set()

    def visit(name: str) -> None:
        if name in seen or name not in by_name:
            return
        seen.add(name)
        for ref in references(by_name[name]).values():
            visit(ref.split(".")[0])
        done.append(by_name[name])

    for s in pipeline.stages:
        visit(s.name)
    return done
