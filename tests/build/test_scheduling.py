"""Which programs a build hands its workers first: the largest models, so that the longest lowering does not
start after the rest (rag_offline cold: the CPU LLM's lowering is the build's critical path); and what follows
a program starting as soon as it settles, while the others build."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from helpers.projects import REPO

from deployc.apply.downstream import Downstream
from deployc.build import programs
from deployc.build.programs import largest_first
from deployc.build.results import UnitResult, WorkerResult
from deployc.load.project import load_project
from deployc.plan.build_plan import UnitPlan
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


class _InTurn:
    """An executor that hands the programs' results on in a given order of models, noting what had been handed
    on downstream before each result came."""

    def __init__(self, order: list[str], seen: list[str]) -> None:
        self.order, self.seen = order, seen
        self.before_last: list[str] = []

    def describe(self, units: int) -> str:
        return "in turn"

    def run(self, todo: list[UnitPlan], folder: Path, cache: Any, events: Any,
            done: Callable[[WorkerResult], None]) -> None:
        ranked = sorted(todo, key=lambda u: (self.order.index(u.model), u.target))
        for i, u in enumerate(ranked):
            if i == len(ranked) - 1:
                self.before_last = list(self.seen)
            done(WorkerResult(key=u.program_key, status="built"))


class _NoCache:
    def get(self, key: str) -> tuple[None, None]:
        return None, None

    def of_kind(self, kind: str) -> _NoCache:
        return self


def test_a_unit_is_handed_on_as_its_program_settles_while_the_rest_build(monkeypatch: pytest.MonkeyPatch) -> None:
    plan = make_plan(load_project(REPO / "manifests" / "rag_offline.yaml"), detect())
    monkeypatch.setattr(programs, "judge_unit", lambda u, r, entry: UnitResult(unit=u, status=r.status))
    seen: list[str] = []
    executor = _InTurn(["embedder", "llm"], seen)
    built = programs.build(plan, _NoCache(), executor, lambda e: None, lambda m: None,  # type: ignore[arg-type]
                           lambda m: None, settled=lambda label, r: seen.append(label))
    labels = [u.label for u in plan.units()]
    assert list(built) == labels and sorted(seen) == sorted(labels)  # each once; the result in the plan's order
    # Before the last program (an LLM) came, both embedders and the other LLM had been handed on.
    assert sorted(executor.before_last) == sorted(lb for lb in labels if lb != seen[-1]) and "llm@" in seen[-1]


def test_a_target_s_assets_start_once_its_embedder_settles(monkeypatch: pytest.MonkeyPatch) -> None:
    from deployc.build import arm64_check
    from deployc.packaging import assets

    plan = make_plan(load_project(REPO / "manifests" / "rag_offline.yaml"), detect())
    started: list[str] = []
    gate = threading.Event()

    def build_assets(plan: Any, target: Any, results: dict[str, UnitResult], *rest: Any) -> list[str]:
        started.append(target.profile)
        gate.wait(10)
        return [f"{target.profile}: {sorted(results)}"]

    monkeypatch.setattr(assets, "build_assets", build_assets)
    monkeypatch.setattr(arm64_check, "check", lambda results, *rest: results)
    units = {(u.model, u.target): u for u in plan.units()}

    def settle(downstream: Downstream, model: str, target: str, status: str) -> None:
        unit = units[(model, target)]
        downstream.settled(unit.label, UnitResult(unit=unit, status=status))

    with Downstream(plan, set(), None, True, lambda m: None) as downstream:  # type: ignore[arg-type]
        settle(downstream, "llm", "snapdragon", "built")
        assert started == []  # snapdragon's index embeds with its embedder, not yet built
        settle(downstream, "embedder", "snapdragon", "built")
        settle(downstream, "embedder", "arduino_q", "failed")
        assert started == ["snapdragon"]  # arduino_q has a failed unit: its assets never start
        gate.set()
        settle(downstream, "llm", "arduino_q", "built")
        checked, built = downstream.finish()
    assert set(checked) == {u.label for u in plan.units()}
    assert built == {"snapdragon": ["snapdragon: ['embedder@snapdragon/npu', 'llm@snapdragon/npu']"]}
