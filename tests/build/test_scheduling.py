"""Which programs a build hands its workers first: the largest models, so that the longest lowering does not
start after the rest (rag_offline cold: the CPU LLM's lowering is the build's critical path)."""

from __future__ import annotations

from helpers.projects import REPO

from deployc.build.programs import largest_first
from deployc.load.project import load_project
from deployc.plan.planner import make_plan
from deployc.plan.toolchain import detect


def test_the_plan_knows_each_model_s_weights_and_the_build_starts_the_largest() -> None:
    units = make_plan(load_project(REPO / "manifests" / "rag_offline.yaml"), detect()).units()
    weights = {(u.model, u.target): u.weights for u in units}
    # MiniLM's from the manifest's `params`; SmolLM2's from the GGUF file's config (tied embeddings).
    assert weights[("embedder", "arduino_q")] == 22_700_000
    assert weights[("llm", "arduino_q")] == weights[("llm", "snapdragon")] == 134_515_008
    order = [(u.model, u.target) for u in largest_first(units)]
    planned = [(u.model, u.target) for u in units]
    assert order[:2] == [p for p in planned if p[0] == "llm"]  # the two LLMs first, in the plan's order
    assert order[2:] == [p for p in planned if p[0] == "embedder"]


def test_units_whose_weights_are_unknown_keep_the_plan_s_order() -> None:
    units = make_plan(load_project(REPO / "manifests" / "rag_offline.yaml"), detect()).units()
    unknown = [u.model_copy(update={"weights": None}) for u in units]
    assert [u.program_key for u in largest_first(unknown)] == [u.program_key for u in units]
