"""Library output sent to a log file instead of the user's terminal: torch's and torchao's warnings,
the ExecuTorch runtime's C++ logging ([cpuinfo_utils.cpp:...]). File descriptors 1 and 2 are
redirected, not just sys.stdout/sys.stderr, because native code writes to them directly."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO


@contextmanager
def captured(log: Path | None, header: str) -> Iterator[IO[str] | None]:
    """While the block runs, this process's stdout and stderr append to `log` (None: left alone)."""
    if log is None:
        yield None
        return
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "a") as f:
        f.write(f"=== {header} (pid {os.getpid()})\n")
        f.flush()
        sys.stdout.flush()
        sys.stderr.flush()
        saved = os.dup(1), os.dup(2)
        os.dup2(f.fileno(), 1)
        os.dup2(f.fileno(), 2)
        try:
            yield f
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.close(saved[0])
            os.close(saved[1])
