"""Caches shared between machines at fsspec URLs: immutable, verified on every read, never half visible."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import fsspec
import pytest
from helpers.projects import make_project, run_subprocess
from helpers.suites import TINY

from deployc.build.cache import Cache, open_cache
from deployc.build.shared_store import SharedStore
from deployc.cli.reproducibility import compare_trees
from deployc.core.cache_location import cache_spec

KEY = "cd" * 32


def _memory_url() -> str:
    return f"memory://deployc-test-{uuid.uuid4().hex}"


def _machine(tmp_path: Path, name: str, url: str) -> Cache:
    """One machine's view of the shared store: its own local mirror, the same URL."""
    return Cache(tmp_path / name, shared=SharedStore(url))


def _publish(cache: Cache, payload: bytes = b"P" * 1000, key: str = KEY) -> None:
    staging = cache.tmp_dir()
    (staging / "program.pte").write_bytes(payload)
    (staging / "report.json").write_text('{"ok": true}')
    cache.put(key, staging)


def test_an_entry_published_by_one_machine_is_read_verified_by_another(tmp_path: Path) -> None:
    url = _memory_url()
    a, b = _machine(tmp_path, "a", url), _machine(tmp_path, "b", url)
    assert not b.has(KEY) and b.get(KEY) == (None, None)
    _publish(a)
    assert b.has(KEY)
    entry, warning = b.get(KEY)
    assert warning is None and entry is not None
    assert entry.path.is_relative_to(tmp_path / "b")  # kept in b's mirror: later reads are local
    assert entry.file("program.pte").read_bytes() == b"P" * 1000
    assert json.loads(entry.file("report.json").read_text()) == {"ok": True}


def test_a_partial_upload_is_never_visible(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    url = _memory_url()
    a, b = _machine(tmp_path, "a", url), _machine(tmp_path, "b", url)

    def cut(*_: object, **__: object) -> None:
        raise ConnectionError("network cut before the marker")

    monkeypatch.setattr(a.shared.fs, "mv", cut)  # type: ignore[union-attr]
    with pytest.raises(ConnectionError):
        _publish(a)
    store = fsspec.filesystem("memory")
    root = url.removeprefix("memory://")
    uploaded = [p for p in store.find(f"/{root}") if p.endswith("program.pte")]
    assert uploaded, "the files were uploaded; only the marker is missing"
    assert not b.has(KEY) and b.get(KEY) == (None, None)
    monkeypatch.undo()
    _publish(a)  # the next publish completes it
    assert b.get(KEY)[0] is not None


def test_entries_are_immutable_first_publish_wins(tmp_path: Path) -> None:
    url = _memory_url()
    a, b, c = (_machine(tmp_path, n, url) for n in "abc")
    _publish(a, b"first")
    _publish(b, b"second")  # a non-reproducible builder somewhere: it cannot replace what is there
    entry = c.get(KEY)[0]
    assert entry is not None and entry.file("program.pte").read_bytes() == b"first"


@pytest.mark.parametrize("damage", ["flip", "delete", "marker"])
def test_a_corrupt_shared_entry_is_refused_and_withdrawn(tmp_path: Path, damage: str) -> None:
    url = _memory_url()
    a, b = _machine(tmp_path, "a", url), _machine(tmp_path, "b", url)
    _publish(a)
    fs = fsspec.filesystem("memory")
    root = url.removeprefix("memory://")
    pte = next(p for p in fs.find(f"/{root}") if p.endswith("program.pte"))
    marker = next(p for p in fs.find(f"/{root}") if p.endswith("entry.json"))
    if damage == "flip":
        fs.pipe_file(pte, b"P" * 999 + b"Q")
    elif damage == "delete":
        fs.rm_file(pte)
    else:
        fs.pipe_file(marker, b"{not json")
    entry, warning = b.get(KEY)
    assert entry is None
    assert warning is not None and warning.startswith(f"shared cache entry {KEY[:12]} is corrupt")
    assert not fs.exists(marker) and not b.has(KEY)
    assert not (tmp_path / "b" / "programs" / KEY[:2] / KEY).exists()  # nothing unverified kept locally
    _publish(a, key=KEY)  # a's local entry is intact; publishing again repairs the shared one
    assert b.get(KEY)[0] is not None


def test_file_url_opens_a_shared_store_with_a_local_mirror(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DEPLOYC_CACHE_MIRROR", str(tmp_path / "mirror"))
    cache = open_cache(f"file://{tmp_path / 'shared'}")
    assert cache.shared is not None and cache.root == tmp_path / "mirror"
    _publish(cache)
    assert (tmp_path / "shared" / "programs" / KEY[:2] / KEY / "entry.json").is_file()
    assert open_cache(str(tmp_path / "plain")).shared is None
    monkeypatch.setenv("DEPLOYC_CACHE_DIR", f"file://{tmp_path / 'shared'}")
    from_env = open_cache(cache_spec(None))
    assert from_env.shared is not None and from_env.get(KEY)[0] is not None
    assert cache_spec(str(tmp_path / "explicit")) == str(tmp_path / "explicit")  # the option wins


@pytest.mark.parametrize("url, expected", [
    ("nosuchproto://bucket/cache", "Protocol not known: nosuchproto"),
    ("s3://bucket/deployc", "s3fs"),
])
def test_unusable_cache_urls_are_user_errors(project: Path, url: str, expected: str) -> None:
    manifest = make_project(project, TINY, "tiny.yaml")
    r = run_subprocess("plan", str(manifest), "--cache-dir", url, cwd=project)
    assert r.code == 2, r.err
    assert r.err.startswith(f"error: --cache-dir / DEPLOYC_CACHE_DIR {url}: ") and expected in r.err
    assert "Traceback" not in r.err


@pytest.mark.slow
def test_ci_machines_share_built_programs_through_a_file_url(tmp_path: Path) -> None:
    manifest = make_project(tmp_path / "project", TINY, "tiny.yaml")
    url = f"file://{tmp_path / 'shared-cache'}"
    first = run_subprocess("build", str(manifest), "--out", str(tmp_path / "out1"), "--cache-dir", url, "--json",
                           cwd=manifest.parent, env={"DEPLOYC_CACHE_MIRROR": str(tmp_path / "mirror1")})
    assert first.code == 0, first.err[-2000:]
    assert {u["status"] for u in json.loads(first.out)["units"]} == {"built"}
    # A second CI machine: a fresh mirror, the same URL. It builds nothing and gets the same bytes.
    r = run_subprocess("build", str(manifest), "--out", str(tmp_path / "out2"), "--cache-dir", url, "--json",
                       cwd=manifest.parent, env={"DEPLOYC_CACHE_MIRROR": str(tmp_path / "mirror2")})
    assert r.code == 0, r.err[-2000:]
    assert {u["status"] for u in json.loads(r.out)["units"]} == {"cached"}
    assert "building" not in r.err
    assert compare_trees(tmp_path / "out1", tmp_path / "out2") == []
    plan = run_subprocess("plan", str(manifest), "--cache-dir", url, "--json", cwd=manifest.parent,
                          env={"DEPLOYC_CACHE_MIRROR": str(tmp_path / "mirror3")})
    assert set(json.loads(plan.out)["cache"].values()) == {"cached"}
