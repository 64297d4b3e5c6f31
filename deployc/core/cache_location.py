"""Where deployc keeps things on this machine: the cache a build uses (a directory, or the local
mirror of a shared cache at an fsspec URL), and the per-user default."""

from __future__ import annotations

import os
from pathlib import Path

from deployc.core.digests import bytes_sha256


def is_url(spec: str) -> bool:
    return "://" in spec


def user_cache_home() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")) / "deployc"


def cache_spec(option: str | None) -> str:
    """--cache-dir, else $DEPLOYC_CACHE_DIR, else ~/.cache/deployc: a path or an fsspec URL."""
    return option or os.environ.get("DEPLOYC_CACHE_DIR") or str(user_cache_home())


def chosen_cache(option: str | None) -> str:
    """cache_spec(option), also made this process's (and its children's) $DEPLOYC_CACHE_DIR: what a command
    derives on the way (a GGUF file's view, QNN's compatibility layer, the library log) lands in the cache the
    user named, not in ~/.cache."""
    spec = cache_spec(option)
    if option:
        os.environ["DEPLOYC_CACHE_DIR"] = option
    return spec


def mirror_dir(url: str) -> Path:
    """Where a shared cache's entries are kept on this machine ($DEPLOYC_CACHE_MIRROR overrides)."""
    if os.environ.get("DEPLOYC_CACHE_MIRROR"):
        return Path(os.environ["DEPLOYC_CACHE_MIRROR"])
    return user_cache_home() / "shared" / bytes_sha256(url.rstrip("/").encode())[:16]


def local_root(spec: str) -> Path:
    """The directory on this machine behind a cache spec (a shared cache's local mirror)."""
    return mirror_dir(spec) if is_url(spec) else Path(spec)
