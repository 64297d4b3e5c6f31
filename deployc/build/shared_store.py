"""A cache shared between machines, at an fsspec URL (file://, memory://, s3://, gs://, ...).

Layout under the URL, per kind (programs, indexes):

    <kind>/<key[:2]>/<key>/<upload id>/<file>     the files, written first, never rewritten
    <kind>/<key[:2]>/<key>/entry.json            the commit marker, written last

An entry exists once its `entry.json` exists. The marker is written to `tmp/` and moved into place:
a rename on file systems, an atomic single-object copy on object stores, so a reader never sees a
marker for files still uploading. Each upload writes under its own id, so two machines publishing the
same key never interleave their files; whichever marker lands last names a complete set. Every read
is verified by sha256 against the marker before anything else sees the bytes.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

from deployc.core.digests import bytes_sha256
from deployc.core.errors import BuildError, UsageError

ENTRY_FILE = "entry.json"  # the commit marker, here and in local caches
MARKER_SCHEMA_VERSION = 1


class CorruptEntry(BuildError):
    """The shared entry does not match its marker (a torn upload from an old client, bit rot, tampering)."""


class SharedStore:
    def __init__(self, url: str) -> None:
        import fsspec  # light (no torch); only loaded when a URL is configured

        self.url = url.rstrip("/")
        try:
            self.fs, root = fsspec.core.url_to_fs(self.url)
        except (ImportError, ValueError) as exc:
            # fsspec says which package a protocol needs ("Install s3fs to access S3").
            raise UsageError(f"--cache-dir / DEPLOYC_CACHE_DIR {url}: {exc}") from exc
        self.root = root.rstrip("/")

    def _dir(self, kind: str, key: str) -> str:
        return f"{self.root}/{kind}/{key[:2]}/{key}"

    def has(self, kind: str, key: str) -> bool:
        d = self._dir(kind, key)
        self.fs.invalidate_cache(d)  # object-store clients cache listings; another machine may have published
        return bool(self.fs.exists(f"{d}/{ENTRY_FILE}"))

    def download(self, kind: str, key: str, dest: Path) -> bool:
        """Write the entry's files into `dest` after checking each against the marker; False if absent."""
        d = self._dir(kind, key)
        self.fs.invalidate_cache(d)
        try:
            marker = json.loads(self.fs.cat_file(f"{d}/{ENTRY_FILE}"))
        except FileNotFoundError:
            return False
        except (ValueError, UnicodeDecodeError) as exc:
            raise CorruptEntry(f"unreadable marker: {exc}") from exc
        try:
            upload, files = marker["upload"], marker["files"]
            for name, info in files.items():
                data = self.fs.cat_file(f"{d}/{upload}/{name}")
                if len(data) != info["size"] or bytes_sha256(data) != info["sha256"]:
                    raise CorruptEntry(f"{name} does not match its sha256")
                (dest / name).write_bytes(data)
        except FileNotFoundError as exc:
            raise CorruptEntry(f"a file is missing ({exc})") from exc
        except (KeyError, TypeError) as exc:
            raise CorruptEntry(f"malformed marker ({exc})") from exc
        return True

    def upload(self, kind: str, key: str, folder: Path, files: dict[str, dict[str, Any]]) -> None:
        """Publish a complete local entry. Immutable: an entry that is already there is left alone."""
        if self.has(kind, key):
            return
        d = self._dir(kind, key)
        upload = uuid.uuid4().hex
        self.fs.makedirs(f"{d}/{upload}", exist_ok=True)
        for name in sorted(files):
            self.fs.put_file(str(folder / name), f"{d}/{upload}/{name}")
        marker = {"schema_version": MARKER_SCHEMA_VERSION, "key": key, "upload": upload, "files": files}
        tmp = f"{self.root}/tmp/{upload}.json"
        self.fs.makedirs(f"{self.root}/tmp", exist_ok=True)
        self.fs.pipe_file(tmp, json.dumps(marker, indent=2, sort_keys=True).encode())
        self.fs.mv(tmp, f"{d}/{ENTRY_FILE}")

    def discard(self, kind: str, key: str) -> None:
        """Withdraw a corrupt entry: the marker first, so no reader trusts the files while they go."""
        d = self._dir(kind, key)
        try:
            self.fs.rm_file(f"{d}/{ENTRY_FILE}")
            self.fs.rm(d, recursive=True)
        except FileNotFoundError:
            pass
