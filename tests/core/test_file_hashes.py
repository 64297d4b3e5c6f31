"""Large files' sha256, remembered under the command's cache directory and trusted only while the file is
provably the one hashed (device, inode, size, mtime, ctime; recently changed files hashed again)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from pathlib import Path

import pytest
from helpers.projects import REPO, run_subprocess

import deployc.core.file_hashes as file_hashes
from deployc.core.file_hashes import FileHashes


def _big(path: Path, fill: bytes) -> Path:
    path.write_bytes(fill * (2_300_000 // len(fill)))
    return path


def _counting(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    hashed: list[Path] = []
    real = file_hashes.file_sha256

    def counted(path: Path) -> str:
        hashed.append(path)
        return real(path)

    monkeypatch.setattr(file_hashes, "file_sha256", counted)
    return hashed


def test_an_edit_that_keeps_size_and_mtime_is_seen(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(file_hashes, "RACY_NS", 0)  # trust records at once: only the stat identity decides
    hashed = _counting(monkeypatch)
    big = _big(tmp_path / "corpus.txt", b"honeybees dance. ")
    hashes = FileHashes(tmp_path / "cache")
    first = hashes.sha256(big)
    assert first == hashlib.sha256(big.read_bytes()).hexdigest()
    assert len(list((tmp_path / "cache" / "hashes").rglob("*.json"))) == 1
    assert hashes.sha256(big) == first and len(hashed) == 1  # remembered
    st = big.stat()
    _big(big, b"HONEYBEES DANCE. ")  # same size
    os.utime(big, ns=(st.st_atime_ns, st.st_mtime_ns))  # touch -r: mtime put back; ctime cannot be
    assert big.stat().st_size == st.st_size and big.stat().st_mtime_ns == st.st_mtime_ns
    assert hashes.sha256(big) == hashlib.sha256(big.read_bytes()).hexdigest() != first


def test_a_file_changed_just_before_it_was_hashed_is_hashed_again(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """Racy: one timestamp tick could hold a later edit with every stat field equal."""
    hashed = _counting(monkeypatch)
    big = _big(tmp_path / "w.bin", b"\x01\x02")
    hashes = FileHashes(tmp_path / "cache")
    hashes.sha256(big)
    hashes.sha256(big)
    assert len(hashed) == 2
    record = json.loads(next((tmp_path / "cache" / "hashes").rglob("*.json")).read_text())
    record["hashed_at_ns"] = time.time_ns() + 10**10  # as if hashed long after the file last changed
    next((tmp_path / "cache" / "hashes").rglob("*.json")).write_text(json.dumps(record))
    hashes.sha256(big)
    assert len(hashed) == 2


def test_no_cache_directory_keeps_no_records(tmp_path: Path) -> None:
    big = _big(tmp_path / "w.bin", b"ab")
    assert FileHashes(None).sha256(big) == hashlib.sha256(big.read_bytes()).hexdigest()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["w.bin"]


def _index_key(folder: Path, cache: Path) -> str:
    r = run_subprocess("plan", str(folder / "rag.yaml"), "--json", "--cache-dir", str(cache), cwd=folder,
                       env={"HOME": str(folder / "home")})
    assert r.code == 0, r.err
    plan = json.loads(r.out)["plan"]
    return next(a["key"] for t in plan["targets"] for a in t["assets"] if a["kind"] == "vector_index")


def test_plan_sees_a_corpus_edit_that_keeps_size_and_mtime(tmp_path: Path) -> None:
    """The full path, as a user meets it: `touch -r` after an edit must change the index key."""
    folder = tmp_path / "project"
    shutil.copytree(REPO / "manifests", folder, ignore=shutil.ignore_patterns("__pycache__", "corpus"))
    (folder / "big").mkdir()
    big = _big(folder / "big" / "notes.md", b"Honeybees find flowers by dancing. ")
    text = (folder / "rag_offline.yaml").read_text().replace('corpus: "corpus/*.md"', 'corpus: "big/*.md"')
    (folder / "rag.yaml").write_text(text)
    cache = tmp_path / "cache"
    before = _index_key(folder, cache)
    records = list((cache / "hashes").rglob("*.json"))
    # The corpus, the LLM's GGUF file and the tokenizer read from it (its view, made in the same cache), under
    # --cache-dir ...
    assert len(records) == 3
    assert not (folder / "home").exists()  # ... and nowhere else
    for record in records:  # as if hashed long after the files last changed: the next plan trusts them
        known = json.loads(record.read_text())
        record.write_text(json.dumps({**known, "hashed_at_ns": time.time_ns() + 10**10}))
    assert _index_key(folder, cache) == before
    st = big.stat()
    _big(big, b"HONEYBEES FIND FLOWERS BY DANCING. ")
    os.utime(big, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert _index_key(folder, cache) != before
