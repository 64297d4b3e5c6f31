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


# Reading: an archive a user hands over is checked whole before anything is extracted.

def _bundle_archive(tmp_path: Path) -> Path:
    folder = _folder(tmp_path / "src", ["bundle.lock.json", "runtime.json", "llm.pte", "assets/x.bin"])
    (folder / "llm.pte").write_bytes(os.urandom(300_000))  # incompressible: cuts land inside the deflate data
    write_archive(folder, "arduino_q", tmp_path / "b.tar.gz")
    return tmp_path / "b.tar.gz"


def _tarball(path: Path, members: list[tuple[str, bytes]]) -> Path:
    import io

    with tarfile.open(path, "w:gz") as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def _refused(path: Path, into: Path) -> str:
    from deployc.core.errors import UserError
    from deployc.packaging.archive import read_archive

    into.mkdir(exist_ok=True)
    with pytest.raises(UserError) as exc:
        read_archive(path, into)
    assert list(into.iterdir()) == []  # nothing extracted
    return str(exc.value)


def test_a_whole_archive_reads_back_as_its_bundle_directory(tmp_path: Path) -> None:
    from deployc.packaging.archive import read_archive

    archive = _bundle_archive(tmp_path)
    folder = read_archive(archive, tmp_path / "out")
    assert folder == tmp_path / "out" / "arduino_q"
    assert (folder / "llm.pte").read_bytes() == (tmp_path / "src" / "llm.pte").read_bytes()


@pytest.mark.parametrize("fraction", [0.1, 0.5, 0.9, 0.99])
def test_a_cut_archive_is_refused_as_truncated(tmp_path: Path, fraction: float) -> None:
    data = _bundle_archive(tmp_path).read_bytes()
    cut = tmp_path / "cut.tar.gz"
    cut.write_bytes(data[:int(len(data) * fraction)])
    assert "archive is truncated (its gzip stream ends early)" in _refused(cut, tmp_path / "out")


@pytest.mark.parametrize("where", ["crc", "middle", "deflate"])
def test_a_flipped_byte_is_refused_as_damaged(tmp_path: Path, where: str) -> None:
    data = bytearray(_bundle_archive(tmp_path).read_bytes())
    at = {"crc": len(data) - 6, "middle": len(data) // 2, "deflate": 12}[where]
    data[at] ^= 0x01
    bad = tmp_path / "bad.tar.gz"
    bad.write_bytes(bytes(data))
    message = _refused(bad, tmp_path / "out")
    assert "archive is damaged" in message, message


def test_archives_that_are_not_one_bundle_directory_are_refused(tmp_path: Path) -> None:
    two = _tarball(tmp_path / "two.tar.gz", [("a/bundle.lock.json", b"{}"), ("b/x", b"1")])
    assert "archive must hold exactly one bundle directory (it holds a, b)" in _refused(two, tmp_path / "o1")
    loose = _tarball(tmp_path / "loose.tar.gz", [("bundle.lock.json", b"{}")])
    assert "archive must hold exactly one bundle directory" in _refused(loose, tmp_path / "o2")
    nolock = _tarball(tmp_path / "nolock.tar.gz", [("a/runtime.json", b"{}")])
    assert "archive's a/ is not a bundle directory (no bundle.lock.json)" in _refused(nolock, tmp_path / "o3")
    evil = _tarball(tmp_path / "evil.tar.gz", [("a/bundle.lock.json", b"{}"), ("a/../../evil", b"1")])
    assert "archive has unsafe members" in _refused(evil, tmp_path / "o4")
    (tmp_path / "empty.tar.gz").write_bytes(b"")
    assert "not a readable bundle archive" in _refused(tmp_path / "empty.tar.gz", tmp_path / "o5")


def test_a_decompression_bomb_is_refused_before_it_is_unpacked(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    import gzip
    import time

    from deployc.core.errors import UsageError
    from deployc.packaging.archive import DEFAULT_LIMIT_MB, archive_limit

    assert archive_limit() == DEFAULT_LIMIT_MB << 20 == 2 << 30
    zeros = bytes(1 << 20)
    bomb = tmp_path / "bomb.tar.gz"
    with gzip.open(bomb, "wb", compresslevel=1) as gz:  # a tar of one 100 MiB member of zeros: ~0.4 MB
        info = tarfile.TarInfo("a/zeros")
        info.size = 100 << 20
        gz.write(info.tobuf())
        for _ in range(100):
            gz.write(zeros)
        gz.write(bytes(1024))
    assert bomb.stat().st_size < 1 << 20
    monkeypatch.setenv("DEPLOYC_ARCHIVE_LIMIT_MB", "64")
    start = time.monotonic()
    assert "archive unpacks to more than 64.0 MiB (the limit; DEPLOYC_ARCHIVE_LIMIT_MB raises it)" in _refused(
        bomb, tmp_path / "out")
    assert time.monotonic() - start < 10  # stopped at the limit, not after the whole stream
    monkeypatch.setenv("DEPLOYC_ARCHIVE_LIMIT_MB", "lots")
    with pytest.raises(UsageError, match="DEPLOYC_ARCHIVE_LIMIT_MB='lots': expected a positive whole number"):
        archive_limit()
