"""Bundle archives. Writing: deterministic .tar.gz (sorted entries, fixed modes, uid/gid 0, mtime from
SOURCE_DATE_EPOCH (default 0), a gzip header without time or file name): same files in, same bytes out.
Reading: an archive a user hands over is checked whole before anything is extracted (its gzip stream to the
end and its CRC, what it unpacks to against a limit and the free disk, its members: one bundle directory,
plain files only), each refusal a located input error."""

from __future__ import annotations

import gzip
import io
import os
import shutil
import tarfile
import zlib
from pathlib import Path, PurePosixPath

from deployc.core.atomic import open_atomic
from deployc.core.errors import UsageError, UserError
from deployc.core.layout import LOCK_FILE

# What an archive may unpack to, unless DEPLOYC_ARCHIVE_LIMIT_MB says otherwise: 8x the largest bundle
# deployc builds today (an NPU decoder's, ~400 MB), and far below what a small gzip of zeros unpacks to.
DEFAULT_LIMIT_MB = 2048
_CHUNK = 1 << 20


def source_date_epoch() -> int:
    try:
        return max(0, int(os.environ.get("SOURCE_DATE_EPOCH", "0")))
    except ValueError:
        return 0


def write_archive(folder: Path, prefix: str, dest: Path) -> None:
    """Archive every file under `folder` as `prefix/<relative path>` into `dest` (written atomically)."""
    mtime = source_date_epoch()
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for path in sorted(p for p in folder.rglob("*") if p.is_file()):
            rel = path.relative_to(folder).as_posix()
            info = tarfile.TarInfo(f"{prefix}/{rel}")
            info.size = path.stat().st_size
            info.mtime = mtime
            info.mode = 0o644
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            with path.open("rb") as f:
                tar.addfile(info, f)
    with open_atomic(dest) as out, gzip.GzipFile(filename="", mode="wb", fileobj=out, mtime=0, compresslevel=9) as gz:
        gz.write(raw.getvalue())


def archive_limit() -> int:
    """Bytes an archive may unpack to (DEPLOYC_ARCHIVE_LIMIT_MB, default 2048 MiB)."""
    raw = os.environ.get("DEPLOYC_ARCHIVE_LIMIT_MB", str(DEFAULT_LIMIT_MB))
    try:
        mb = int(raw)
    except ValueError:
        mb = -1
    if mb <= 0:
        raise UsageError(f"DEPLOYC_ARCHIVE_LIMIT_MB={raw!r}: expected a positive whole number of MiB")
    return mb << 20


def _mib(n: int) -> str:
    return f"{n / (1 << 20):,.1f} MiB"


def _unpacked_size(path: Path, limit: int) -> int:
    """Reads the gzip stream to its end without writing anything: a cut stream, bad deflate data or a CRC
    that does not match is refused, and so is a stream that unpacks past `limit` (as soon as it does)."""
    total = 0
    try:
        with gzip.open(path, "rb") as gz:
            while chunk := gz.read(_CHUNK):
                total += len(chunk)
                if total > limit:
                    raise UserError.at(path, f"archive unpacks to more than {_mib(limit)} (the limit; "
                                             "DEPLOYC_ARCHIVE_LIMIT_MB raises it): refused before extracting anything")
    except EOFError:
        raise UserError.at(path, "archive is truncated (its gzip stream ends early): an interrupted download "
                                 "or copy? Nothing was extracted") from None
    except (gzip.BadGzipFile, zlib.error) as exc:
        raise UserError.at(path, f"archive is damaged ({exc}): nothing was extracted") from None
    return total


def _members(path: Path, tar: tarfile.TarFile) -> list[tarfile.TarInfo]:
    try:
        return tar.getmembers()
    except (tarfile.TarError, EOFError) as exc:
        raise UserError.at(path, f"archive is damaged (its tar structure: {exc}): nothing was extracted") from None


def _check_members(path: Path, members: list[tarfile.TarInfo], limit: int, into: Path) -> None:
    unsafe = [m.name for m in members if m.name.startswith("/") or ".." in PurePosixPath(m.name).parts
              or not (m.isfile() or m.isdir()) or m.issparse()]
    if unsafe:
        raise UserError.at(path, "archive has unsafe members (absolute, '..', links, devices or sparse files): "
                                 f"{', '.join(unsafe[:5])}")
    tops = sorted({PurePosixPath(m.name).parts[0] for m in members if PurePosixPath(m.name).parts})
    loose = any(m.isfile() and len(PurePosixPath(m.name).parts) == 1 for m in members)
    if len(tops) != 1 or loose or not any(m.isfile() for m in members):
        found = ", ".join(tops[:5]) if tops else "nothing"
        raise UserError.at(path, f"archive must hold exactly one bundle directory (it holds {found})")
    if not any(m.isfile() and PurePosixPath(m.name).parts[1:] == (LOCK_FILE,) for m in members):
        raise UserError.at(path, f"archive's {tops[0]}/ is not a bundle directory (no {LOCK_FILE})")
    total = sum(m.size for m in members if m.isfile())
    if total > limit:
        raise UserError.at(path, f"archive's members add up to {_mib(total)}, past the limit of {_mib(limit)} "
                                 "(DEPLOYC_ARCHIVE_LIMIT_MB raises it): refused before extracting anything")
    free = shutil.disk_usage(into).free
    if total > free:
        raise UserError.at(path, f"archive unpacks to {_mib(total)}; {into} has {_mib(free)} free")


def read_archive(path: Path, into: Path) -> Path:
    """The bundle directory of the archive at `path`, extracted under `into` once the whole archive has been
    checked (a gzip stream or a plain tar)."""
    limit = archive_limit()
    into.mkdir(parents=True, exist_ok=True)
    with path.open("rb") as f:
        gzipped = f.read(2) == b"\x1f\x8b"
    if gzipped:
        _unpacked_size(path, limit)
    elif path.stat().st_size > limit:
        raise UserError.at(path, f"archive is {_mib(path.stat().st_size)}, past the limit of {_mib(limit)} "
                                 "(DEPLOYC_ARCHIVE_LIMIT_MB raises it)")
    try:
        with tarfile.open(path, "r:gz" if gzipped else "r:") as tar:
            members = _members(path, tar)
            _check_members(path, members, limit, into)
            tar.extractall(into, filter="data")
    except (tarfile.TarError, EOFError, zlib.error) as exc:
        raise UserError.at(path, f"not a readable bundle archive (a .tar.gz of one bundle directory): {exc}") from None
    return into / PurePosixPath(members[0].name).parts[0]
