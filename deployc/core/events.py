"""Progress of program builds, as data: workers emit these, executors forward them, the console shows
them (a live table on a terminal, plain lines elsewhere). Retries are counted from `attempt`.

Plain frozen dataclasses: they cross process boundaries (a multiprocessing queue, Ray) by pickling, and
the console imports this module on every command."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True)
class Event:
    label: str  # the unit's label, model@target/unit
    kind: Literal["queued", "started", "step", "finished"]
    step: str = ""  # "step": load, quantize, export, lower, serialize, verify
    attempt: int = 0  # "started": 1 for the first worker process, more when a dead one was replaced
    max_attempts: int = 1  # "started": how many worker processes the executor tries at most
    where: str = ""  # "started", "finished": the process or node building it
    status: str = ""  # "finished": built, cached, failed


EventSink = Callable[[Event], None]
Say = Callable[[str], None]  # a line for people: a build phase, a warning
