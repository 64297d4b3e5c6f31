"""Shared caches under concurrency, corrupted entries, a full disk, untrusted paths, untrusted code."""

from __future__ import annotations

import os
import resource
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.projects import REPO, build_json, make_project
from helpers.suites import TINY

from deployc.build.cache import Cache
from deployc.cli.reproducibility import compare_trees
from deployc.packaging.inspection import verify_bundle


def _entry(tmp_path: Path) -> tuple[Cache, str]:
    cache = Cache(tmp_path / "cache")
    staging = cache.tmp_dir()
    (staging / "program.pte").write_bytes(b"P" * 1000)
    (staging / "report.json").write_text("{}")
    key = "ab" * 32
    cache.put(key, staging)
    return cache, key


@pytest.mark.parametrize("damage", ["flip", "truncate", "delete", "entry-json"])
def test_corrupt_cache_entries_are_detected_and_discarded(tmp_path: Path, damage: str) -> None:
    cache, key = _entry(tmp_path)
    pte = cache.get(key)[0].file("program.pte")  # type: ignore[union-attr]
    if damage == "flip":
        data = bytearray(pte.read_bytes())
        data[10] ^= 1
        pte.write_bytes(bytes(data))
    elif damage == "truncate":
        pte.write_bytes(pte.read_bytes()[:500])
    elif damage == "delete":
        pte.unlink()
    else:
        (pte.parent / "entry.json").write_text("{not json")
    entry, warning = cache.get(key)
    assert entry is None and warning is not None and warning.startswith(f"cache entry {key[:12]} is corrupt")
    assert not cache.has(key)  # discarded: the next build rebuilds it
    assert cache.get(key) == (None, None)


@pytest.mark.slow
def test_concurrent_builds_share_one_cache(tmp_path: Path) -> None:
    manifest = make_project(tmp_path / "project", TINY, "tiny.yaml")
    cache = tmp_path / "cache"
    procs = [subprocess.Popen([sys.executable, "-m", "deployc", "build", str(manifest), "--out", str(tmp_path / out),
                               "--cache-dir", str(cache), "--json"], cwd=manifest.parent, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
             for out in ("a", "b", "shared", "shared")]
    results = [p.communicate(timeout=600) for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0, 0], [r[1][-1000:] for r in results]
    assert len(list((cache / "programs").glob("*/*/entry.json"))) == 1
    assert compare_trees(tmp_path / "a", tmp_path / "b") == []
    assert compare_trees(tmp_path / "a", tmp_path / "shared") == []
    assert verify_bundle(tmp_path / "shared" / "tiny" / "0.1.0" / "arduino_q") == []


@pytest.mark.slow
def test_full_disk_gives_a_clear_error_and_keeps_the_previous_bundle(tmp_path: Path) -> None:
    manifest = make_project(tmp_path / "project", TINY, "tiny.yaml")
    out, cache = tmp_path / "dist", tmp_path / "cache"
    result, _ = build_json(manifest, out, cache)
    assert result.code == 0, result.err[-1000:]
    bundle = out / "tiny" / "0.1.0" / "arduino_q"
    before = {p.relative_to(bundle).as_posix(): p.read_bytes() for p in bundle.rglob("*") if p.is_file()}
    manifest.write_text(TINY.replace("hidden: 16", "hidden: 24"))
    build_json(manifest, tmp_path / "scratch", cache)  # cache the new program; packaging is what fails below

    def small_files() -> None:  # a disk that takes no file over 4 KB (the program copy is larger)
        import signal

        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))

    proc = subprocess.run([sys.executable, "-m", "deployc", "build", str(manifest), "--out", str(out), "--cache-dir",
                           str(cache), "--force"], cwd=manifest.parent, capture_output=True, text=True,
                          preexec_fn=small_files, timeout=600)
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr
    assert "error: File too large" in proc.stderr or "File too large" in proc.stderr
    assert {p.relative_to(bundle).as_posix(): p.read_bytes() for p in bundle.rglob("*") if p.is_file()} == before
    assert verify_bundle(bundle) == []
    assert not [p for p in bundle.parent.iterdir() if p.name.startswith(".arduino_q.")]


def test_target_path_cannot_escape_the_output_directory(tmp_path: Path, cli, monkeypatch) -> None:
    project = tmp_path / "deep" / "project"
    make_project(project, TINY.replace("targets: [arduino_q]", "targets: [../../evil.yaml]"), "m.yaml")
    evil = (REPO / "targets" / "arduino_q.yaml").read_text().replace("name: arduino_q", "name: evil")
    (tmp_path / "deep" / "project" / ".." / ".." / "evil.yaml").write_text(evil)
    monkeypatch.chdir(project)
    r = cli("plan", "m.yaml", "--json")
    assert r.code == 0, r.err
    from deployc.load.project import load_project
    from deployc.plan.planner import make_plan
    from deployc.plan.toolchain import detect

    plan = make_plan(load_project(project / "m.yaml", env={}), detect({}))
    (target,) = plan.targets
    assert target.target == "../../evil.yaml" and target.profile == "evil"  # bundles go to OUT/tiny/0.1.0/evil


def test_validate_and_plan_never_import_model_code(tmp_path: Path) -> None:
    project = make_project(tmp_path / "project", TINY.replace("models.small:mlp", "models.trap:build"), "m.yaml")
    (project.parent / "models" / "trap.py").write_text(
        "from pathlib import Path\nPath(__file__).with_name('IMPORTED').write_text('x')\n"
        "def build():\n    raise SystemExit('factory ran')\n")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    for command in (["validate", "m.yaml"], ["plan", "m.yaml"], ["plan", "m.yaml", "--json"]):
        proc = subprocess.run([sys.executable, "-m", "deployc", *command], cwd=project.parent, env=env,
                              capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0, proc.stderr
    assert not (project.parent / "models" / "IMPORTED").exists()
    shutil.rmtree(project.parent / "models" / "__pycache__", ignore_errors=True)
