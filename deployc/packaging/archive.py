"""Deterministic .tar.gz: sorted entries, fixed modes, uid/gid 0, mtime from SOURCE_DATE_EPOCH (default 0),
and a gzip header without time or file name. Same files in, same bytes out."""

from __future__ import annotations

import gzip
import io
import os
import tarfile
from pathlib import Path

from deployc.core.atomic import open_atomic


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
