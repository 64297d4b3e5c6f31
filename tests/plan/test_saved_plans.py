"""Saved plans (`deployc plan --out`, `deployc build --plan`), the checks that guard applying one, and
what a plan says about existing releases before anything is lowered. No programs are built here."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers.projects import make_project
from helpers.suites import TINY

from deployc.apply.apply_plan import check_inputs, check_releases
from deployc.core import layout
from deployc.core.errors import ManifestError, PlanChanged, UserError
from deployc.load.project import load_project
from deployc.plan.build_plan import load_plan, save_plan
from deployc.plan.planner import make_plan
from deployc.plan.releases import comparison, release_status
from deployc.plan.toolchain import detect


@pytest.fixture
def tiny(tmp_path: Path) -> Path:
    return make_project(tmp_path / "project", TINY, "tiny.yaml")


def test_a_saved_plan_loads_as_the_same_object(tiny: Path, tmp_path: Path) -> None:
    plan = make_plan(load_project(tiny), detect())
    save_plan(plan, tmp_path / "plan.json")
    assert load_plan(tmp_path / "plan.json") == plan
    assert not list(tmp_path.glob(".plan.json.*"))  # written through a temp file
    roles = {f.role for f in plan.inputs}
    assert roles == {"manifest", "profile", "model source"}
    assert plan.folder == tiny.parent.resolve() and plan.manifest.version_at.line == 3


def test_plan_out_writes_the_plan(tiny: Path, tmp_path: Path, cli) -> None:
    r = cli("plan", str(tiny), "--out", str(tmp_path / "saved.json"), "--dist", str(tmp_path / "dist"))
    assert r.code == 0, r.err
    assert f"plan saved to {tmp_path / 'saved.json'}; apply it with: deployc build --plan" in r.err
    assert load_plan(tmp_path / "saved.json").manifest.name == "tiny"
    assert "release arduino_q: new (no release yet)" in r.out


def test_applying_a_plan_whose_inputs_changed_is_refused(tiny: Path, tmp_path: Path, cli) -> None:
    saved = tmp_path / "plan.json"
    save_plan(make_plan(load_project(tiny), detect()), saved)
    check_inputs(load_plan(saved), detect(), saved)  # nothing changed yet
    source = tiny.parent / "models" / "small.py"
    source.write_text(source.read_text() + "\n# an edit\n")
    with pytest.raises(PlanChanged, match=f"{source} \\(model source\\) changed: sha256 "):
        check_inputs(load_plan(saved), detect(), saved)
    r = cli("build", "--plan", str(saved), "--out", str(tmp_path / "dist"), "--cache-dir", str(tmp_path / "cache"))
    assert r.code == 2
    assert r.err.startswith(f"error: {saved}: the plan no longer matches its inputs: {source} (model source) changed")
    assert not (tmp_path / "dist").exists()


def test_a_plan_made_with_other_tools_is_refused(tiny: Path, tmp_path: Path) -> None:
    plan = make_plan(load_project(tiny), detect())
    now = detect()
    newer = now.model_copy(update={"versions": {**now.versions, "torch": "2.99.0"},
                                   "code": {**now.code, "xnnpack": "0" * 64}})
    with pytest.raises(PlanChanged) as info:
        check_inputs(plan, newer, tmp_path / "p.json")
    assert f"torch {now.versions['torch']} when planned, now 2.99.0" in str(info.value)
    assert "deployc's xnnpack code changed since the plan was made" in str(info.value)


@pytest.mark.parametrize("text,problem", [
    ("{", "not a deployc plan (invalid JSON: Expecting property name enclosed in double quotes)"),
    ('{"schema_version": 1}', "plan schema version 1; this deployc applies version 3"),
    ('{"schema_version": 3, "targets": []}', "not a valid deployc plan: manifest: Field required"),
])
def test_a_broken_plan_file_is_a_located_error(tmp_path: Path, text: str, problem: str, cli) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(text)
    with pytest.raises(UserError) as info:
        load_plan(bad)
    assert problem in info.value.diagnostics[0].message
    r = cli("build", "--plan", str(bad))
    assert r.code == 2 and r.err.startswith(f"{bad}") and "Traceback" not in r.err


def test_build_takes_a_manifest_or_a_plan(tiny: Path, tmp_path: Path, cli) -> None:
    r = cli("build", str(tiny), "--plan", str(tmp_path / "p.json"))
    assert r.code == 2 and "give a manifest or --plan PLAN_FILE (one of them)" in r.err
    r = cli("build")
    assert r.code == 2
    r = cli("build", "--plan", str(tmp_path / "p.json"), "--target", "arduino_q")
    assert r.code == 2 and "a saved plan has its targets already" in r.err


def _release(plan, out: Path, lock: dict | None) -> Path:  # type: ignore[no-untyped-def]
    bundle = out / plan.targets[0].bundle.dir
    bundle.mkdir(parents=True)
    if lock is not None:
        (bundle / "bundle.lock.json").write_text(json.dumps(lock))
    return bundle


def test_release_status_before_anything_is_lowered(tiny: Path, tmp_path: Path) -> None:
    plan = make_plan(load_project(tiny), detect())
    t = plan.targets[0]
    same = {"bundle_key": t.bundle.bundle_key, "content_keys": t.bundle.content_keys,
            "tools": plan.toolchain.versions, "code": plan.toolchain.code}
    assert [s.state for s in release_status(plan, tmp_path / "a")] == ["new"]
    _release(plan, tmp_path / "b", same)
    assert [s.state for s in release_status(plan, tmp_path / "b")] == ["unchanged"]
    _release(plan, tmp_path / "c", {**same, "tools": {**same["tools"], "torch": "0.1"}})
    assert [s.state for s in release_status(plan, tmp_path / "c")] == ["tools-changed"]
    # Rebuilt once with these tools and found byte-identical: unchanged from then on, until the lock or
    # the tools differ from what the note says.
    noted = tmp_path / "c" / layout.compared_file(t.bundle.archive)
    noted.parent.mkdir()
    noted.write_text(json.dumps(comparison(plan, tmp_path / "c" / t.bundle.dir)))
    assert [s.state for s in release_status(plan, tmp_path / "c")] == ["unchanged"]
    noted.write_text(json.dumps({**comparison(plan, tmp_path / "c" / t.bundle.dir), "tools": {"torch": "9"}}))
    assert [s.state for s in release_status(plan, tmp_path / "c")] == ["tools-changed"]
    _release(plan, tmp_path / "d", {"files": {}})
    assert [s.state for s in release_status(plan, tmp_path / "d")] == ["unknown"]
    _release(plan, tmp_path / "e", {**same, "bundle_key": "0" * 64, "content_keys": {"net.pte": "1" * 64}})
    (changed,) = release_status(plan, tmp_path / "e")
    assert changed.state == "changed"
    assert changed.files == ["net.pte", "runtime.bin", "runtime.json", "selftest/net.json"]
    with pytest.raises(ManifestError) as info:
        check_releases(plan, tmp_path / "e", force=False)
    d = info.value.diagnostics[0]
    assert (d.location.path, d.location.line) == (str(tiny), 3)
    assert d.message == (f"version: release tiny 0.1.0 for arduino_q already exists in "
                         f"{tmp_path / 'e' / 'tiny' / '0.1.0'} "
                         "with different content (net.pte, runtime.bin, runtime.json, selftest/net.json)")
    assert [s.state for s in check_releases(plan, tmp_path / "e", force=True)] == ["changed"]


def test_a_tolerance_change_changes_the_bundle_but_not_the_program(tiny: Path) -> None:
    before = make_plan(load_project(tiny), detect())
    tiny.write_text(tiny.read_text() + "    verify: {min_cosine: 0.5}\n")
    after = make_plan(load_project(tiny), detect())
    assert before.units()[0].program_key == after.units()[0].program_key
    b, a = before.targets[0].bundle, after.targets[0].bundle
    assert b.content_keys == a.content_keys and b.bundle_key != a.bundle_key
