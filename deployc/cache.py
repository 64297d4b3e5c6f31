"""Content-addressed store of built programs.

An entry is a directory named by its program key, holding the artifact files and `entry.json` (the
sha256 and size of each file). Writers take a per-key file lock, re-check, build into a temp dir in
the same store and rename it into place, so a reader sees a complete entry or none. Every read
re-hashes the files; a corrupted entry is removed and reported as missing.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from filelock import FileLock

from deployc.fingerprint import file_sha256

ENTRY_SCHEMA_VERSION = 1
ENTRY_FILE = "entry.json"

Status = Literal["cached", "stale", "new"]


def default_cache_dir() -> Path:
    if os.environ.get("DEPLOYC_CACHE_DIR"):
        return Path(os.environ["DEPLOYC_CACHE_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "deployc"


@dataclass(frozen=True)
class Entry:
    key: str
    path: Path
    files: dict[str, dict[str, int | str]]

    def file(self, name: str) -> Path:
        return self.path / name


class Cache:
    def __init__(self, root: Path, kind: str = "programs") -> None:
        self.root = root
        self.kind = kind  # programs, indexes: separate namespaces sharing locks and temp space

    def of_kind(self, kind: str) -> "Cache":
        return Cache(self.root, kind)

    def _dir(self, key: str) -> Path:
        return self.root / self.kind / key[:2] / key

    def _unit_index(self, unit_id: str) -> Path:
        return self.root / "units" / unit_id

    def has(self, key: str) -> bool:
        """Cheap presence check (no hashing), for `plan`."""
        return (self._dir(key) / ENTRY_FILE).is_file()

    def status(self, key: str, unit_id: str) -> Status:
        if self.has(key):
            return "cached"
        index = self._unit_index(unit_id)
        return "stale" if index.is_file() else "new"

    def get(self, key: str) -> tuple[Entry | None, str | None]:
        """The verified entry, or (None, why it was discarded) / (None, None) when absent."""
        d = self._dir(key)
        meta = d / ENTRY_FILE
        if not meta.is_file():
            return None, None
        try:
            data = json.loads(meta.read_text())
            files = data["files"]
            for name, info in files.items():
                f = d / name
                if not f.is_file():
                    raise ValueError(f"{name} is missing")
                if f.stat().st_size != info["size"] or file_sha256(f) != info["sha256"]:
                    raise ValueError(f"{name} does not match its sha256")
        except (ValueError, KeyError, TypeError, json.JSONDecodeError) as exc:
            self._discard(key)
            return None, f"cache entry {key[:12]} is corrupt ({exc}); rebuilding"
        return Entry(key, d, files), None

    def _discard(self, key: str) -> None:
        d = self._dir(key)
        if d.exists():
            trash = Path(tempfile.mkdtemp(dir=self._tmp_root(), prefix="trash-"))
            try:
                d.rename(trash / "entry")
            except OSError:
                pass
            shutil.rmtree(trash, ignore_errors=True)

    def _tmp_root(self) -> Path:
        t = self.root / "tmp"
        t.mkdir(parents=True, exist_ok=True)
        return t

    @contextmanager
    def lock(self, key: str) -> Iterator[None]:
        locks = self.root / "locks"
        locks.mkdir(parents=True, exist_ok=True)
        with FileLock(str(locks / f"{key}.lock")):
            yield

    def put(self, key: str, staging: Path, unit_id: str | None = None) -> Entry:
        """Move a fully written `staging` dir (under tmp_dir()) into place as entry `key`."""
        files = {}
        for f in sorted(staging.iterdir()):
            if f.is_file() and f.name != ENTRY_FILE:
                files[f.name] = {"sha256": file_sha256(f), "size": f.stat().st_size}
        meta = {"schema_version": ENTRY_SCHEMA_VERSION, "key": key, "files": files}
        (staging / ENTRY_FILE).write_text(json.dumps(meta, indent=2, sort_keys=True))
        target = self._dir(key)
        target.parent.mkdir(parents=True, exist_ok=True)
        if target.exists():  # a corrupt leftover; the lock holder may replace it
            self._discard(key)
        os.replace(staging, target)
        if unit_id is not None:
            self.remember(unit_id, key)
        return Entry(key, target, files)

    def remember(self, unit_id: str, key: str) -> None:
        index = self._unit_index(unit_id)
        index.parent.mkdir(parents=True, exist_ok=True)
        tmp = index.with_name(index.name + f".{os.getpid()}.tmp")
        tmp.write_text(key)
        os.replace(tmp, index)

    def tmp_dir(self) -> Path:
        return Path(tempfile.mkdtemp(dir=self._tmp_root(), prefix="build-"))


def unit_id(model: str, target: str, unit: str) -> str:
    return f"{model}--{target}--{unit}"
