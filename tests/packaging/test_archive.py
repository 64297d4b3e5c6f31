"""Bundle archives made directly (packaging/archive.py): the same files give the same bytes whatever their
order on disk, their modes and times; entries sorted under the prefix, owned by no one, timed by
SOURCE_DATE_EPOCH."""

from __future__ import annotations

import os
import tarfile
from pathlib import Path

import pytest

from deployc.packaging.archive import write_archive


def _folder(root: Path, names: list[str]) -> Path:
    for name in names:
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(name.encode() * 3)
    return root


def test_the_same_files_give_the_same_bytes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SOURCE_DATE_EPOCH", raising=False)
    a = _folder(tmp_path / "a", ["runtime.bin", "assets/index.npy", "llm.pte"])
    b = _folder(tmp_path / "b", ["llm.pte", "assets/index.npy", "runtime.bin"])  # made in another order
    os.chmod(b / "llm.pte", 0o600)
    os.utime(b / "runtime.bin", (1_000_000, 1_000_000))
    write_archive(a, "rag/1.0.0/t", tmp_path / "a.tar.gz")
    write_archive(b, "rag/1.0.0/t", tmp_path / "b.tar.gz")
    assert (tmp_path / "a.tar.gz").read_bytes() == (tmp_path / "b.tar.gz").read_bytes()
    with tarfile.open(tmp_path / "a.tar.gz") as tar:
        members = tar.getmembers()
    assert [m.name for m in members] == ["rag/1.0.0/t/assets/index.npy", "rag/1.0.0/t/llm.pte",
                                         "rag/1.0.0/t/runtime.bin"]
    assert {(m.mode, m.uid, m.gid, m.uname, m.mtime) for m in members} == {(0o644, 0, 0, "", 0)}


def test_source_date_epoch_times_the_entries(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = _folder(tmp_path / "f", ["a.pte"])
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1700000000")
    write_archive(folder, "p", tmp_path / "x.tar.gz")
    with tarfile.open(tmp_path / "x.tar.gz") as tar:
        assert [m.mtime for m in tar.getmembers()] == [1700000000]
