"""Two of the ways a replayed run once printed something other than what a full run prints (issue 26):
every run is a full run now, so a switched symlink is seen at once."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from helpers.projects import REPO, make_project, run_subprocess

MODEL = "  clf:\n    source: {factory: 'models.small:mlp'}\n    inputs: {x: {shape: [1, 64]}}\n"

PROFILE = """\
apiVersion: deployc/v1
name: board
device: {{soc: {soc}, os: linux, abi: arm64-v8a}}
units:
  - {{name: cpu, backend: xnnpack, quantization: [fp32, 8da8w]}}
"""


def _soc(plan_json: str) -> str:
    return json.loads(plan_json)["plan"]["targets"][0]["device"]["soc"]


def test_a_switched_profile_folder_link_is_seen(tmp_path: Path) -> None:
    """The project's `targets` is a link (as this repository's is); pointing it at another folder holding a
    profile of the same name changes the plan at once."""
    for soc in ("SM8650", "SM8750"):
        (tmp_path / soc).mkdir()
        (tmp_path / soc / "board.yaml").write_text(PROFILE.format(soc=soc))
    project = tmp_path / "project"
    manifest = make_project(project, f"apiVersion: deployc/v1\nname: m\nversion: 1.0.0\ntargets: [board]\nmodels:\n{MODEL}")
    shutil.rmtree(project / "targets")
    (project / "targets").symlink_to(tmp_path / "SM8650")
    first = run_subprocess("plan", str(manifest), "--json", cwd=project)
    assert first.code == 0, first.err
    (project / "targets").unlink()
    (project / "targets").symlink_to(tmp_path / "SM8750")
    second = run_subprocess("plan", str(manifest), "--json", cwd=project)
    assert second.code == 0, second.err
    assert (_soc(first.out), _soc(second.out)) == ("SM8650", "SM8750")


def test_a_project_reached_through_a_switched_link_is_read_again(tmp_path: Path) -> None:
    """`current -> v1`, then `current -> v2`: validate reads v2's manifest, and refuses it when it is broken."""
    for version, body in (("v1", "version: 1.0.0\n"), ("v2", "version: 2.0\n")):
        make_project(tmp_path / version, f"apiVersion: deployc/v1\nname: m\n{body}targets: [arduino_q]\n"
                                         f"models:\n{MODEL}", "m.yaml")
    current = tmp_path / "current"
    current.symlink_to(tmp_path / "v1")
    ok = run_subprocess("validate", str(current / "m.yaml"), cwd=tmp_path)
    assert ok.code == 0 and "(m 1.0.0:" in ok.out, ok.err
    current.unlink()
    current.symlink_to(tmp_path / "v2")
    broken = run_subprocess("validate", str(current / "m.yaml"), cwd=tmp_path)
    assert broken.code == 2 and "m.yaml:3:10: error: version: 2.0 was read as a number" in broken.err, broken.err
    assert str(REPO) not in broken.err
