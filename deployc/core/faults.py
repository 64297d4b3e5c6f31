"""Named fault points for the crash tests: DEPLOYC_FAULT=NAME SIGKILLs the whole build's process group
when execution reaches NAME, as a power cut or an OOM killer would. Inert unless that variable is set."""

from __future__ import annotations

import os
import signal

# The points: export, cache-write (worker processes), package-staged, package-archived (the build).


def fault_point(name: str) -> None:
    if os.environ.get("DEPLOYC_FAULT") == name:
        os.killpg(os.getpgid(0), signal.SIGKILL)
