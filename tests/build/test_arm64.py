"""Programs for an arm64 device's CPU are also run by ExecuTorch's arm64 runtime under qemu-aarch64 (#30):
judged with the unit's tolerances, cached by program key, skippable, `not-run` with the reason when the
machine cannot run them; the arm64 runner itself is reproducible and runs bundles (`inspect --self-test
--arch aarch64`, `run --arch aarch64`)."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from helpers.projects import Built, build_json, run_subprocess


@pytest.fixture
def arm(suite: Built) -> Built:
    """The suite's arduino_q units are arm64 CPU programs (and an MCU one): the suite's own build checked them
    under qemu, so these tests read that build instead of building the same programs again."""
    return suite


def test_cpu_programs_of_an_arm64_device_are_judged_on_arm64_kernels_too(arm: Built) -> None:
    for model in ("mlp_fp32", "mlp_8da8w"):
        unit = arm.unit(model, "arduino_q")
        x86, a64 = unit["verification"], unit["arm64"]
        assert x86["status"] == "passed"
        assert a64["status"] == "passed", a64
        assert a64["cpu"] == "cortex-a53"  # the UNO Q's cores, from its profile
        assert a64["cases"] >= 1 and not a64["cached"]
        # The same program, other kernels: close to x86's figures, judged with the same tolerances.
        assert a64["metrics"]["min_cosine"] >= unit["verification"]["tolerance"]["min_cosine"]
        assert abs(a64["metrics"]["min_cosine"] - x86["metrics"]["min_cosine"]) < 1e-3
    assert "mlp_8da8w@arduino_q/cpu: checked on arm64 (cortex-a53, qemu) in " in arm.result.err
    assert arm.unit("tiny", "arduino_q")["arm64"] is None  # the MCU is no arm64 CPU


def test_a_rebuild_takes_the_arm64_measurement_from_the_cache(arm: Built, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    shutil.copytree(arm.cache, cache)  # the suite's cache stays as its build left it
    result, report = build_json(arm.manifest, tmp_path / "dist", cache)
    assert result.code == 0, result.err[-2000:]
    unit = next(u for u in report["units"] if u["model"] == "mlp_8da8w" and u["target"] == "arduino_q")
    assert unit["arm64"]["status"] == "passed" and unit["arm64"]["cached"]
    assert unit["arm64"]["metrics"] == arm.unit("mlp_8da8w", "arduino_q")["arm64"]["metrics"]
    assert "checked on arm64" not in result.err


def test_no_emulate_reports_the_check_not_run(arm: Built, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    shutil.copytree(arm.cache, cache)
    result = run_subprocess("build", str(arm.manifest), "--out", str(tmp_path / "dist"), "--cache-dir",
                            str(cache), "--no-emulate", cwd=arm.folder)
    assert result.code == 0, result.err[-2000:]
    assert "not run on arm64: mlp_fp32 on arduino_q: skipped: deployc build --no-emulate" in result.out


@pytest.mark.full  # a second build, qemu hidden
def test_without_qemu_the_check_is_not_run_with_the_reason(arm: Built, tmp_path: Path) -> None:
    result, report = build_json(arm.manifest, tmp_path / "dist", tmp_path / "cache2", "--target", "arduino_q",
                                env={"DEPLOYC_QEMU_AARCH64": "/nonexistent/qemu-aarch64"})
    assert result.code == 0, result.err[-2000:]
    a64 = next(u for u in report["units"] if u["model"] == "mlp_fp32" and u["target"] == "arduino_q")["arm64"]
    assert a64["status"] == "not-run"
    assert a64["reason"].startswith("no arm64 runner on this machine: /nonexistent/qemu-aarch64 not found")


def test_a_miss_on_arm64_fails_the_unit_naming_the_cpu_and_the_figure(arm: Built) -> None:
    from deployc.build.arm64_check import _judged
    from deployc.build.results import UnitResult, Verification

    plan_unit = _unit_plan(arm)
    passed = UnitResult(unit=plan_unit, status="built", program="/x/program.pte",
                        verification=Verification(status="passed", tolerance=_tolerance(plan_unit)))
    judged = _judged(passed, {"status": "measured", "reason": "", "cases": 3, "min_cosine": 0.91,
                              "min_sqnr_db": 9.5, "max_abs": 0.4}, seconds=0.5)
    assert judged.status == "failed" and judged.arm64 is not None and judged.arm64.status == "failed"
    assert judged.failure is not None and judged.failure.step == "verify-arm64"
    assert judged.failure.error.startswith("on arm64 (ExecuTorch's aarch64 runtime under qemu-aarch64 -cpu "
                                           "cortex-a53), verification against eager PyTorch missed: cosine 0.910000")
    crashed = _judged(passed, {"status": "failed", "reason": "program.forward: execution failed (error 18)",
                               "cases": 0}, seconds=0.5)
    assert crashed.status == "failed" and crashed.failure is not None
    assert crashed.failure.error.endswith("execution failed (error 18)")


def test_the_check_runs_the_budgets_points_and_always_the_held_out_positions(tmp_path: Path) -> None:
    from deployc.build.arm64_check import _cases
    from deployc.plan.arm64_checks import fitting

    smol = 134_515_008  # SmolLM2-135M's weights: a 512-token prefill under qemu is past a 300 s budget
    fit = fitting([{"seq": 1}, {"seq": 256}, {"seq": 512}], "seq", 8, smol, 300.0)
    assert (fit.run, fit.left_out, fit.estimate_s) == ([{"seq": 1}, {"seq": 256}], [{"seq": 512}], 164.7)
    tiny = fitting([{"seq": 1}, {"seq": 256}, {"seq": 512}], "seq", 94, 4_200_000, 300.0)
    assert (tiny.run, tiny.left_out) == ([{"seq": 1}, {"seq": 256}, {"seq": 512}], [])
    assert fitting([{"seq": 256}, {"seq": 2}], "seq", 8, smol, 1.0).run == [{"seq": 2}]  # the smallest, always
    vectors = tmp_path / "selftest.json"
    cases = [{"dims": {"seq": 1}}, {"dims": {"seq": 256}}, {"dims": {"seq": 512}},
             {"dims": {"seq": 1}, "target": 7}, {"dims": {"seq": 2}, "task": {"measure": "top1"}}]
    vectors.write_text(json.dumps({"schema_version": 3, "cases": cases}))
    assert _cases(vectors, None, tmp_path / "kept.json") == vectors  # every point: the file itself
    kept = json.loads(_cases(vectors, fit.run, tmp_path / "kept.json").read_text())["cases"]
    assert kept == [cases[0], cases[1], cases[3], cases[4]]


def test_points_left_out_are_reported(arm: Built) -> None:
    from deployc.build.arm64_check import _judged
    from deployc.build.results import UnitResult, Verification
    from deployc.plan.build_plan import Verify

    plan_unit = _unit_plan(arm)
    assert plan_unit.verify.arm64_points is None  # the suite's own unit (no decoder) runs every point
    budgeted = plan_unit.verify.model_copy(update={"points": [{"seq": 1}, {"seq": 512}],
                                                   "arm64_points": [{"seq": 1}], "budget_s": 300.0})
    plan_unit = plan_unit.model_copy(update={"steps": [budgeted if isinstance(s, Verify) else s
                                                       for s in plan_unit.steps]})
    passed = UnitResult(unit=plan_unit, status="built", program="/x/program.pte",
                        verification=Verification(status="passed", tolerance=_tolerance(plan_unit)))
    judged = _judged(passed, {"status": "measured", "reason": "", "cases": 1, "min_cosine": 1.0,
                              "min_sqnr_db": 60.0, "max_abs": 0.0}, seconds=0.5)
    assert judged.status == "built" and judged.arm64 is not None and judged.arm64.status == "passed"
    assert judged.arm64.left_out == [{"seq": 512}]


def _unit_plan(arm: Built):  # type: ignore[no-untyped-def]
    from deployc.load.project import load_project
    from deployc.plan.planner import make_plan
    from deployc.plan.toolchain import detect

    plan = make_plan(load_project(arm.manifest), detect())
    return next(u for u in plan.units() if u.model == "mlp_8da8w" and u.target == "arduino_q")


def _tolerance(unit):  # type: ignore[no-untyped-def]
    from deployc.build.results import Tolerance

    v = unit.verify
    return Tolerance(min_cosine=v.min_cosine, min_sqnr_db=v.min_sqnr_db, max_abs=v.max_abs)


def test_inspect_self_test_on_arm64(arm: Built) -> None:
    result = run_subprocess("inspect", str(arm.bundle("arduino_q")), "--self-test", "--arch", "aarch64", "--json",
                            cwd=arm.folder)
    assert result.code == 0, result.err[-2000:]
    rows = {r["program"]: r for r in json.loads(result.out)["self_test"]}
    assert rows["mlp_8da8w"]["status"] == "passed" and rows["mlp_8da8w"]["summary"]["min_cosine"] > 0.99
    assert rows["tiny"]["status"] == "not-run"
    assert "this runner has no cortex_m delegate" in rows["tiny"]["reason"]


@pytest.mark.full  # two cross builds of the runner
def test_the_arm64_runner_builds_reproducibly(arm: Built, tmp_path: Path) -> None:
    from deployc.targets import arm64_runner

    shared = arm64_runner.prepare(lambda _: None)
    again = arm64_runner.prepare(lambda _: None, tmp_path / "build")
    assert again.binary.read_bytes() == shared.binary.read_bytes()
    copy, system = again.libraries()
    assert {p.name for p in copy} >= {"libexecutorch.so", "libexecutorch_backend_xnnpack.so", "libsentencepiece.so.0"}
    assert "libc.so.6" in system
    shutil.rmtree(tmp_path / "build")


def test_an_executorch_other_than_the_pinned_one_gets_no_arm64_runtime(monkeypatch: pytest.MonkeyPatch,
                                                                       tmp_path: Path) -> None:
    from deployc.targets import arm64_runner

    monkeypatch.setenv("DEPLOYC_TOOLCHAINS", str(tmp_path))
    monkeypatch.setattr(arm64_runner.installed, "version", lambda name: "9.9.0")
    with pytest.raises(arm64_runner.Unavailable, match=re.escape("pinned to executorch 1.5.1; this environment has "
                                                                 "executorch 9.9.0")):
        arm64_runner.runtime(lambda _: None)
    assert not any(tmp_path.iterdir())  # nothing fetched, nothing half-written
