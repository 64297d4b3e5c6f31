"""The `deployc` command: answer from a stamp when an identical earlier run still holds, else run the
CLI and stamp the run (deployc/stamp.py). Kept apart from cli.py so the fast path imports nothing heavy."""

from __future__ import annotations

import sys

from deployc import stamp


def entry() -> None:
    argv = sys.argv[1:]
    replayed = stamp.replay(argv)
    if replayed is not None:
        sys.exit(replayed)
    if not (stamp.enabled() and stamp.eligible(argv)):
        from deployc.cli import main

        sys.exit(main(argv))
    with stamp.Recorder(argv) as recorder:
        from deployc.cli import main  # inside: what importing it reads or prints is part of the run

        code = main(argv)
    recorder.finish(code)
    sys.exit(code)
