"""Where the programs of a plan are built.

`local`: a pool of worker processes on this machine (`--jobs`). `ray`: one Ray task per program on a
Ray cluster (`--ray-address`, or a cluster started for the build). Both hand WorkerJobs to
build.program_job.build_program and hand on its WorkerResults as they come, each with the node that built the program
and how many worker processes started it. The driver plans, judges and packages; executors only build.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from deployc.build.cache import Cache
from deployc.build.results import WorkerResult
from deployc.core.events import EventSink
from deployc.plan.build_plan import UnitPlan


class Executor(Protocol):
    def describe(self, units: int) -> str:
        """How the units will be built, for the progress line."""
        ...

    def run(self, todo: list[UnitPlan], folder: Path, cache: Cache, events: EventSink,
            done: Callable[[WorkerResult], None]) -> None:
        """Build every unit's program into `cache`, handing each result to `done` (in this thread) as it comes,
        so what depends on one program starts while the others build."""
        ...


class _OnFirstUse:
    """An executor made when something has to be built: a no-op build never imports multiprocessing."""

    def __init__(self, make: Callable[[], Executor]) -> None:
        self._make = make
        self._made: Executor | None = None

    def _executor(self) -> Executor:
        if self._made is None:
            self._made = self._make()
        return self._made

    def describe(self, units: int) -> str:
        return self._executor().describe(units)

    def run(self, todo: list[UnitPlan], folder: Path, cache: Cache, events: EventSink,
            done: Callable[[WorkerResult], None]) -> None:
        self._executor().run(todo, folder, cache, events, done)


def make_executor(name: str, jobs: int, ray_address: str | None = None, verbose: bool = False) -> Executor:
    """`verbose`: library output goes to this terminal instead of each unit's log file."""
    if name == "ray":  # made now: a missing Ray or a bad setting is said before anything is planned
        from deployc.build.executors.ray_cluster import RayExecutor

        return RayExecutor(ray_address, jobs)

    def local() -> Executor:
        from deployc.build.executors.local import LocalExecutor

        return LocalExecutor(jobs, verbose)

    return _OnFirstUse(local)
