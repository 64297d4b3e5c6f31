"""sha256 of the files a plan reads, with large files' hashes remembered in the cache directory the
command was given, so that `deployc plan` on a manifest naming gigabytes of weights hashes them once.

A remembered hash is used only while the file is provably the one that was hashed, as git's index
decides it: the same device, inode, size, mtime and ctime (ns), and not "racy": a file changed within
RACY_NS of when it was hashed could change again within one timestamp tick and keep every stat field, so
it is hashed again until it has been still for longer than that. ctime cannot be set back by a user, so
an edit that keeps size and mtime (`touch -r`) is seen.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from pathlib import Path

from deployc.core.atomic import write_atomic
from deployc.core.digests import bytes_sha256, file_sha256

REMEMBER_FROM_BYTES = 1 << 20  # smaller files are hashed again: cheaper than a record
RACY_NS = 2_000_000_000  # coarser than any file system's timestamps (FAT's 2 s included)
RECORD_VERSION = 2


def _identity(st: os.stat_result) -> list[int]:
    return [st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]


class FileHashes:
    """sha256 of files; `root` (a cache directory) keeps records of large ones, None keeps none."""

    def __init__(self, root: Path | None) -> None:
        self.root = root / "hashes" if root is not None else None

    def _record(self, path: Path) -> Path | None:
        if self.root is None:
            return None
        name = bytes_sha256(str(path.resolve()).encode("utf-8", "surrogateescape"))
        return self.root / name[:2] / f"{name}.json"

    def sha256(self, path: Path) -> str:
        st = path.stat()
        record = self._record(path) if st.st_size >= REMEMBER_FROM_BYTES else None
        if record is None:
            return file_sha256(path)
        identity = _identity(st)
        try:
            known = json.loads(record.read_text())
            if (known["version"] == RECORD_VERSION and known["identity"] == identity
                    and max(st.st_mtime_ns, st.st_ctime_ns) < int(known["hashed_at_ns"]) - RACY_NS):
                return str(known["sha256"])
        except (OSError, ValueError, KeyError, TypeError):
            pass
        hashed_at = time.time_ns()  # before reading: a change while hashing makes the record racy
        sha = file_sha256(path)
        if _identity(path.stat()) != identity:  # changed while it was read: no record of a torn read
            return file_sha256(path)
        with contextlib.suppress(OSError):  # a read-only cache only costs the next run a re-hash
            write_atomic(record, json.dumps({"version": RECORD_VERSION, "path": str(path.resolve()),
                                             "identity": identity, "hashed_at_ns": hashed_at, "sha256": sha}))
        return sha
