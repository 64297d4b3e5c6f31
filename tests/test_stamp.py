"""Stamps (deployc/stamp.py): an unchanged validate, plan or no-op build is answered from the record of
an identical earlier run, and every kind of change sends the command back to the full path.

Each run is a real `python -X importtime -m deployc` process: the import log (written by the interpreter
to the real stderr, not through deployc) tells whether pydantic was loaded, i.e. whether the command
ran or was replayed."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from build_suite import TINY
from conftest import REPO, make_project


@dataclass
class Run:
    code: int
    out: str
    err: str  # what deployc printed (the import log taken out)
    replayed: bool


def deployc(*args: str, cwd: Path, cache: Path, env: dict[str, str] | None = None, merged: bool = False) -> Run:
    """`merged`: stdout and stderr as one terminal would show them (in `err`, in order)."""
    full = {**os.environ, "DEPLOYC_CACHE_DIR": str(cache), **(env or {})}
    for name in ("QNN_SDK_ROOT", "DEPLOYC_TARGETS_PATH", "DEPLOYC_STAMP"):
        if name not in (env or {}):
            full.pop(name, None)
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "deployc", *args], cwd=cwd, env=full,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT if merged else subprocess.PIPE,
                          text=True, timeout=600)
    lines = (proc.stdout if merged else proc.stderr).splitlines(keepends=True)
    imports = [line for line in lines if line.startswith("import time:")]
    err = "".join(line for line in lines if not line.startswith("import time:"))
    return Run(proc.returncode, "" if merged else proc.stdout, err, not any(" pydantic" in line for line in imports))


def settle() -> None:
    """Inputs changed within a second of a run are not trusted (coarse timestamps): let them age."""
    time.sleep(1.1)


def edit_in_place(path: Path, old: str, new: str) -> None:
    """Change a file keeping its size and mtime: only its ctime tells."""
    assert len(old) == len(new)
    st = path.stat()
    path.write_text(path.read_text().replace(old, new, 1))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert path.stat().st_size == st.st_size and path.stat().st_mtime_ns == st.st_mtime_ns


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """TINY built once (cache and dist): copied by the tests that change it."""
    folder = tmp_path_factory.mktemp("stamped")
    manifest = make_project(folder / "project", TINY, "tiny.yaml")
    r = deployc("build", "tiny.yaml", "--out", str(folder / "dist"), "--cache-dir", str(folder / "programs"),
                cwd=manifest.parent, cache=folder / "home")
    assert r.code == 0, r.err[-3000:]
    return folder


@pytest.fixture
def copy(built: Path, tmp_path: Path) -> Path:
    shutil.copytree(built, tmp_path / "w", ignore=shutil.ignore_patterns("home"))
    settle()
    return tmp_path / "w"


def test_an_unchanged_plan_is_replayed_byte_for_byte(copy: Path) -> None:
    project, home = copy / "project", copy / "home"
    args = ("plan", "tiny.yaml", "--cache-dir", str(copy / "programs"), "--dist", str(copy / "dist"),
            "--out", "saved/plan.json")
    first = deployc(*args, cwd=project, cache=home)
    assert first.code == 0 and not first.replayed, first.err
    saved = (project / "saved" / "plan.json").read_bytes()
    second = deployc(*args, cwd=project, cache=home)
    assert second.replayed
    assert (second.code, second.out, second.err) == (first.code, first.out, first.err)
    assert "release arduino_q: unchanged" in second.out and "cached" in second.out
    (project / "saved" / "plan.json").unlink()
    third = deployc(*args, cwd=project, cache=home)
    assert third.replayed and (project / "saved" / "plan.json").read_bytes() == saved  # written again
    full = deployc(*args, cwd=project, cache=home, merged=True, env={"DEPLOYC_STAMP": "off"})
    again = deployc(*args, cwd=project, cache=home, merged=True)
    assert not full.replayed and again.replayed
    assert again.err == full.err  # stdout and stderr interleaved as the command printed them
    assert full.err.index("release arduino_q") < full.err.index("plan saved to")
    as_json = deployc("plan", "tiny.yaml", "--json", cwd=project, cache=home)
    assert not as_json.replayed  # other arguments: another stamp
    assert deployc("plan", "tiny.yaml", "--json", cwd=project, cache=home).out == as_json.out


def test_a_no_op_build_is_replayed_and_a_tampered_bundle_is_not(copy: Path) -> None:
    project, home = copy / "project", copy / "home"
    args = ("build", "tiny.yaml", "--out", str(copy / "dist"), "--cache-dir", str(copy / "programs"))
    first = deployc(*args, cwd=project, cache=home)
    second = deployc(*args, cwd=project, cache=home)
    assert first.code == 0 and not first.replayed and second.replayed, first.err
    assert (second.out, second.err) == (first.out, first.err)
    program = copy / "dist" / "tiny" / "0.1.0" / "arduino_q" / "net.pte"
    good = program.read_bytes()
    st = program.stat()
    program.write_bytes(good[:-1] + bytes([good[-1] ^ 1]))  # same size, same mtime: a flipped bit
    os.utime(program, ns=(st.st_atime_ns, st.st_mtime_ns))
    third = deployc(*args, cwd=project, cache=home)
    assert third.code == 0 and not third.replayed, third.err
    assert "warning: release arduino_q in " in third.err and "no longer matches its lock" in third.err
    assert program.read_bytes() == good  # the full path saw the bundle no longer matched its lock


def _plan(copy: Path, **env: str) -> Run:
    return deployc("plan", "tiny.yaml", "--cache-dir", str(copy / "programs"), cwd=copy / "project",
                   cache=copy / "home", env=env)


def _change_manifest(copy: Path) -> str:
    edit_in_place(copy / "project" / "tiny.yaml", "version: 0.1.0", "version: 0.1.1")
    return "tiny 0.1.1"


def _new_model_source(copy: Path) -> str:
    (copy / "project" / "models" / "helpers.py").write_text("SCALE = 2\n")  # the factory's package grew
    return ""  # the program key folds every file of the factory's package: the output differs


def _shadowing_profile(copy: Path) -> str:
    targets = copy / "project" / "targets"
    text = (targets / "arduino_q.yaml").read_text()
    (targets / "arduino_q.yaml").unlink()  # the built-in profile of that name is used now...
    settle()
    assert _plan(copy).code == 0
    (targets / "arduino_q.yaml").write_text(text)  # ...and the project's comes back
    return "│ cached "


CHANGES = {"manifest edited in place": _change_manifest, "file added to the model package": _new_model_source,
           "profile file appears": _shadowing_profile}


@pytest.mark.parametrize("change", list(CHANGES))
def test_every_change_runs_the_command_again(copy: Path, change: str) -> None:
    before = _plan(copy)
    assert before.code == 0
    assert _plan(copy).replayed
    expected = CHANGES[change](copy)
    after = _plan(copy)
    assert after.code == 0 and not after.replayed, after.err
    assert expected in after.out if expected else after.out != before.out


def test_a_filled_cache_and_the_environment_are_seen(copy: Path) -> None:
    programs = copy / "programs"
    shutil.move(programs, copy / "aside")
    settle()
    empty = _plan(copy)
    assert "│ new " in empty.out and _plan(copy).replayed
    shutil.move(copy / "aside", programs)  # a build elsewhere filled the cache
    filled = _plan(copy)
    assert not filled.replayed and "│ cached " in filled.out
    env = _plan(copy, DEPLOYC_TARGETS_PATH=str(copy / "nowhere"))
    assert not env.replayed and env.code == 0


def test_runs_that_cannot_be_replayed_are_not_stamped(copy: Path) -> None:
    project, home = copy / "project", copy / "home"
    (project / "bad.yaml").write_text("apiVersion: deployc/v1\nname: bad\n")
    settle()
    for _ in range(2):  # a failure is never stamped: its message comes from a real run each time
        bad = deployc("validate", "bad.yaml", cwd=project, cache=home)
        assert bad.code == 2 and not bad.replayed and "bad.yaml" in bad.err
    for _ in range(2):
        off = deployc("validate", "tiny.yaml", cwd=project, cache=home, env={"DEPLOYC_STAMP": "off"})
        assert off.code == 0 and not off.replayed
    assert not (home / "stamps").exists()
    (project / "fresh.yaml").write_text((project / "tiny.yaml").read_text())  # just written: too recent to trust
    for _ in range(2):
        assert not deployc("validate", "fresh.yaml", cwd=project, cache=home).replayed
    assert not (home / "stamps").exists()
    settle()
    assert not deployc("validate", "fresh.yaml", cwd=project, cache=home).replayed
    assert deployc("validate", "fresh.yaml", cwd=project, cache=home).replayed


def test_the_fast_path_imports_nothing_heavy() -> None:
    """deployc.launch and deployc.stamp load only the standard library before a replay."""
    code = ("import sys; import deployc.launch; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('pydantic', 'typer', 'rich', 'yaml', "
            "'torch') or (m.startswith('deployc') and m not in ('deployc', 'deployc.launch', 'deployc.stamp'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True).stdout
    assert out.strip() == "[]"


def test_stamps_and_hash_records_are_where_the_cache_says(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from deployc import stamp
    from deployc.cache_paths import cache_spec, local_root

    for env in ({"DEPLOYC_CACHE_DIR": str(tmp_path / "c")}, {"XDG_CACHE_HOME": str(tmp_path / "x")}, {}):
        for name in ("DEPLOYC_CACHE_DIR", "XDG_CACHE_HOME"):
            monkeypatch.delenv(name, raising=False)
        for name, value in env.items():
            monkeypatch.setenv(name, value)
        assert stamp.local_cache() == str(local_root(cache_spec(None)).absolute())


def test_a_release_made_by_other_tools_is_compared_once(copy: Path) -> None:
    """After a deployc or torch upgrade a release's lock names the old tools: the first build stages it again
    and finds the same bytes (leaving them as published); later no-op builds skip that and are replayed."""
    import json

    project, home = copy / "project", copy / "home"
    args = ("build", "tiny.yaml", "--out", str(copy / "dist"), "--cache-dir", str(copy / "programs"))
    lock_file = copy / "dist" / "tiny" / "0.1.0" / "arduino_q" / "bundle.lock.json"
    lock = json.loads(lock_file.read_text())
    lock_file.write_text(json.dumps({**lock, "tools": {**lock["tools"], "torch": "2.12.0"}}, indent=2))
    before = lock_file.read_bytes()
    settle()
    plan = deployc("plan", "tiny.yaml", "--dist", str(copy / "dist"), "--cache-dir", str(copy / "programs"),
                   cwd=project, cache=home)
    assert "release arduino_q: tools-changed" in plan.out
    first = deployc(*args, cwd=project, cache=home)
    assert first.code == 0 and lock_file.read_bytes() == before, first.err  # same bytes: left as published
    assert (copy / "dist" / ".deployc-locks" / "tiny-0.1.0-arduino_q.compared.json").is_file()
    settle()
    second, third = deployc(*args, cwd=project, cache=home), deployc(*args, cwd=project, cache=home)
    assert second.code == 0 and not second.replayed and third.replayed  # nothing staged: stamped
    plan = deployc("plan", "tiny.yaml", "--dist", str(copy / "dist"), "--cache-dir", str(copy / "programs"),
                   cwd=project, cache=home)
    assert "release arduino_q: unchanged" in plan.out
