"""The planner called directly (no CLI, no torch): a candidate's eight steps in order, each key folding the one
before, the program key the serialize step's, and what decides it."""

from __future__ import annotations

from pathlib import Path

from helpers.projects import make_project
from helpers.suites import TINY

from deployc.core.digests import key_of
from deployc.load.project import load_project
from deployc.plan.build_plan import Serialize, UnitPlan
from deployc.plan.planner import make_plan
from deployc.plan.toolchain import Toolchain, detect


def _unit(tmp_path: Path, manifest: str, toolchain: Toolchain) -> UnitPlan:
    path = make_project(tmp_path / "project", manifest, "tiny.yaml")
    [unit] = make_plan(load_project(path), toolchain).units()
    return unit


def test_a_candidate_is_eight_keyed_steps_and_its_program_key_is_the_serialize_step_s(tmp_path: Path) -> None:
    toolchain = detect()
    unit = _unit(tmp_path, TINY, toolchain)
    assert [type(s).__name__ for s in unit.steps] == ["LoadModel", "Export", "Quantize", "Lower", "Serialize",
                                                      "Verify", "CheckBudget", "Package"]
    previous = key_of(toolchain.versions, toolchain.code["compile"])
    for step in unit.steps:
        assert step.key == key_of(previous, step.model_dump(mode="json", exclude={"key"}))
        previous = step.key
    assert unit.program_key == next(s.key for s in unit.steps if isinstance(s, Serialize))
    assert unit.verify.points == [{"batch": 1}, {"batch": 2}, {"batch": 4}]
    assert (unit.model, unit.target, unit.unit, unit.backend) == ("net", "arduino_q", "cpu", "xnnpack")


def test_what_follows_serialize_never_moves_the_program_key(tmp_path: Path) -> None:
    toolchain = detect()
    base = _unit(tmp_path / "a", TINY, toolchain)
    looser = _unit(tmp_path / "b", TINY.replace("      batch: {min: 1, max: 4}\n",
                                                "      batch: {min: 1, max: 4}\n    verify: {min_cosine: 0.9}\n"),
                   toolchain)
    wider = _unit(tmp_path / "c", TINY.replace("max: 4", "max: 8"), toolchain)
    assert looser.program_key == base.program_key and looser.verify.key != base.verify.key
    assert wider.program_key != base.program_key  # the dims are exported: another program
    again = _unit(tmp_path / "d", TINY, toolchain)  # the same project in another folder: the same keys
    assert [s.key for s in again.steps] == [s.key for s in base.steps]
