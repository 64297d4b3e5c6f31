"""sha256 of large files, remembered by path, size and modification time, so that `deployc plan` on a
manifest naming gigabytes of weights hashes them once, not on every run."""

from __future__ import annotations

import json
import os
from pathlib import Path

from deployc.cache_paths import cache_spec, local_root
from deployc.fingerprint import bytes_sha256, file_sha256

REMEMBER_FROM_BYTES = 1 << 20  # smaller files are hashed again: cheaper than a record


def sha256_of(path: Path) -> str:
    st = path.stat()
    if st.st_size < REMEMBER_FROM_BYTES:
        return file_sha256(path)
    name = bytes_sha256(str(path.resolve()).encode())
    record = local_root(cache_spec(None)) / "hashes" / name[:2] / f"{name}.json"
    try:
        known = json.loads(record.read_text())
        if known["size"] == st.st_size and known["mtime_ns"] == st.st_mtime_ns:
            return str(known["sha256"])
    except (OSError, ValueError, KeyError, TypeError):
        pass
    sha = file_sha256(path)
    try:
        record.parent.mkdir(parents=True, exist_ok=True)
        tmp = record.with_name(f".{record.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps({"path": str(path.resolve()), "size": st.st_size, "mtime_ns": st.st_mtime_ns,
                                   "sha256": sha}))
        os.replace(tmp, record)
    except OSError:  # a read-only cache only costs the next run a re-hash
        pass
    return sha
