"""Content-addressed store of built programs.

An entry is a directory named by its program key, holding the artifact files and `entry.json` (the
sha256 and size of each file). Writers take a per-key file lock, re-check, build into a temp dir in
the same store and rename it into place, so a reader sees a complete entry or none. Every read
re-hashes the files; a corrupted entry is removed and reported as missing.

A cache at an fsspec URL (`--cache-dir s3://...`) is a local mirror in front of a SharedStore:
reads fall through to the shared store (verified, then kept in the mirror); every new entry is
published to it. Programs are built and packaged from local files either way.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from deployc.build.shared_store import ENTRY_FILE, CorruptEntry, SharedStore
from deployc.core.atomic import write_atomic
from deployc.core.cache_location import is_url, mirror_dir
from deployc.core.digests import file_sha256
from deployc.core.file_hashes import FileHashes

if TYPE_CHECKING:
    from deployc.plan.build_plan import BuildPlan

ENTRY_SCHEMA_VERSION = 1

Status = Literal["cached", "stale", "new"]


def plan_status(plan: BuildPlan, cache: Cache) -> dict[str, Status]:
    """For `deployc plan`: each program key and index key of the plan -> cached, stale or new."""
    status = {c.program_key: cache.status(c.program_key, c.slug) for u in plan.units()
              for group in (u, *u.fallbacks) for c in (group, *group.candidates)}
    indexes = cache.of_kind("indexes")
    status.update({a.key: "cached" if indexes.has(a.key) else "new"
                   for t in plan.targets for a in t.assets if a.kind == "vector_index"})
    return status


def open_cache(spec: str) -> Cache:
    if is_url(spec):
        return Cache(mirror_dir(spec), shared=SharedStore(spec))
    return Cache(Path(spec))


@dataclass(frozen=True)
class Entry:
    key: str
    path: Path
    files: dict[str, dict[str, int | str]]

    def file(self, name: str) -> Path:
        return self.path / name


class Cache:
    def __init__(self, root: Path, kind: str = "programs", shared: SharedStore | None = None) -> None:
        self.root = root
        self.kind = kind  # programs, indexes: separate namespaces sharing locks and temp space
        self.shared = shared

    @property
    def spec(self) -> str:
        """What another process passes to open_cache() to reach the same entries."""
        return self.shared.url if self.shared else str(self.root)

    def file_hashes(self) -> FileHashes:
        """Where the plan remembers large files' sha256: this cache's directory (a shared cache's mirror)."""
        return FileHashes(self.root)

    def of_kind(self, kind: str) -> Cache:
        return Cache(self.root, kind, self.shared)

    def _dir(self, key: str) -> Path:
        return self.root / self.kind / key[:2] / key

    def _unit_index(self, slug: str) -> Path:
        return self.root / "units" / slug

    def has(self, key: str) -> bool:
        """Cheap presence check (no hashing), for `plan`."""
        return (self._dir(key) / ENTRY_FILE).is_file() or bool(self.shared and self.shared.has(self.kind, key))

    def status(self, key: str, slug: str) -> Status:
        """cached; stale: this unit (by its slug) was built before with another key; or new."""
        if self.has(key):
            return "cached"
        index = self._unit_index(slug)
        return "stale" if index.is_file() else "new"

    def get(self, key: str) -> tuple[Entry | None, str | None]:
        """The verified entry, or (None, why it was discarded) / (None, None) when absent."""
        entry, warning = self._get_local(key)
        if entry is not None or self.shared is None:
            return entry, warning
        with self.lock(key):
            entry, _ = self._get_local(key)
            if entry is not None:
                return entry, warning
            staging = self.tmp_dir()
            try:
                found = self.shared.download(self.kind, key, staging)
            except CorruptEntry as exc:
                shutil.rmtree(staging, ignore_errors=True)
                self.shared.discard(self.kind, key)
                return None, f"shared cache entry {key[:12]} is corrupt ({exc}); rebuilding"
            except BaseException:
                shutil.rmtree(staging, ignore_errors=True)
                raise
            if not found:
                shutil.rmtree(staging, ignore_errors=True)
                return None, warning
            return self._put_local(key, staging), warning

    def _get_local(self, key: str) -> tuple[Entry | None, str | None]:
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
        except (ValueError, KeyError, TypeError, AttributeError, json.JSONDecodeError) as exc:
            self._discard(key)
            return None, f"cache entry {key[:12]} is corrupt ({exc}); rebuilding"
        return Entry(key, d, files), None

    def _discard(self, key: str) -> None:
        d = self._dir(key)
        if d.exists():
            trash = Path(tempfile.mkdtemp(dir=self._tmp_root(), prefix="trash-"))
            with suppress(OSError):  # another reader moved it first
                d.rename(trash / "entry")
            shutil.rmtree(trash, ignore_errors=True)

    def _tmp_root(self) -> Path:
        t = self.root / "tmp"
        t.mkdir(parents=True, exist_ok=True)
        return t

    @contextmanager
    def lock(self, key: str) -> Iterator[None]:
        from filelock import FileLock  # only builds take locks: plan and a no-op build never load it

        locks = self.root / "locks"
        locks.mkdir(parents=True, exist_ok=True)
        # Reentrant: a builder holding the lock may read through to the shared store, which locks too.
        with FileLock(str(locks / f"{key}.lock"), is_singleton=True):
            yield

    def put(self, key: str, staging: Path, slug: str | None = None) -> Entry:
        """Move a fully written `staging` dir (under tmp_dir()) into place as entry `key`; publish it."""
        entry = self._put_local(key, staging)
        if slug is not None:
            self.remember(slug, key)
        self.publish(entry)
        return entry

    def publish(self, entry: Entry) -> None:
        """Make a local entry visible in the shared store (a no-op without one, or when it is there)."""
        if self.shared is not None:
            self.shared.upload(self.kind, entry.key, entry.path, entry.files)

    def _put_local(self, key: str, staging: Path) -> Entry:
        files: dict[str, dict[str, int | str]] = {}
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
        return Entry(key, target, files)

    def remember(self, slug: str, key: str) -> None:
        write_atomic(self._unit_index(slug), key)

    def tmp_dir(self) -> Path:
        return Path(tempfile.mkdtemp(dir=self._tmp_root(), prefix="build-"))

    @property
    def log_dir(self) -> Path:
        """Unit logs: what libraries print while a program builds."""
        return self.root / "logs"

