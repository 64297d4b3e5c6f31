"""Files written whole or not at all: the one way deployc writes a file a reader may look at.

The bytes go to a temp file beside the target (same file system, so the rename is atomic), named
`.<name>.<pid>-<random>.tmp` (hidden, and recognisable as garbage once its writer is gone), then the temp is
renamed over the target, or linked to it when an existing file must never be replaced. A writer that
fails or is interrupted removes its temp file; one that is killed leaves only a hidden `.tmp`.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

TEMP_SUFFIX = ".tmp"


def temp_name(path: Path) -> Path:
    return path.with_name(f".{path.name}.{os.getpid()}-{secrets.token_hex(4)}{TEMP_SUFFIX}")


def temp_glob(path: Path) -> str:
    """The pattern of `path`'s temp files (what killed writers leave), for cleaning them up under a lock."""
    return f".{path.name}.*{TEMP_SUFFIX}"


@contextmanager
def open_atomic(path: Path, *, replace: bool = True) -> Iterator[BinaryIO]:
    """A binary file that becomes `path` when the block ends without an exception. `replace=False` refuses
    to replace an existing file (FileExistsError, the temp removed)."""
    tmp = temp_name(path)
    # 0o666 and O_EXCL: the user's umask decides the mode, as for any file they create; never an old temp.
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with os.fdopen(fd, "wb") as f:
            yield f
        if replace:
            os.replace(tmp, path)
        else:
            os.link(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def write_atomic(path: Path, data: bytes | str, *, replace: bool = True) -> None:
    """`data` (text is written as UTF-8) as the whole content of `path`; parent folders are made."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open_atomic(path, replace=replace) as f:
        f.write(data.encode("utf-8") if isinstance(data, str) else data)
