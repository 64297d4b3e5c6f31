"""The local executor: a pool of spawned worker processes, one program at a time each."""

from __future__ import annotations

import multiprocessing
import os
import queue
import socket
import threading
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path
from typing import Any

from deployc.build import program_job
from deployc.build.cache import Cache
from deployc.build.results import Node, WorkerJob, WorkerResult
from deployc.core.events import Event, EventSink
from deployc.graph import preprocess, worker
from deployc.plan.build_plan import UnitPlan

_busy: Any = None  # the pool's count of workers building a program now, shared between them


def _init_worker(events: Any, log_dir: str | None, busy: Any, jobs: int) -> None:
    """Pool initializer. Import-time chatter of the libraries goes to the worker's log file, not the
    user's terminal (each unit's own output then goes to the unit's log); failures reach the user
    through the results. A lowering may fork as many processes as the pool has idle workers
    (graph/preprocess.py): the processes never outnumber --jobs."""
    global _busy
    if log_dir is not None:
        Path(log_dir).mkdir(parents=True, exist_ok=True)
        log = open(Path(log_dir) / f"worker-{os.getpid()}.log", "a")  # noqa: SIM115 - lives as long as the worker
        os.dup2(log.fileno(), 1)
        os.dup2(log.fileno(), 2)
    worker.set_event_sink(events.put)
    _busy = busy
    preprocess.set_spare(lambda: max(0, jobs - _busy.value))


def _build(job: WorkerJob) -> WorkerResult:
    node = Node(executor="local", host=socket.gethostname(), pid=os.getpid())
    worker.emit(Event(label=job.unit.label, kind="started", attempt=1, where=f"this machine (pid {node.pid})"))
    with _busy.get_lock():
        _busy.value += 1
    try:
        result = program_job.build_program(job)
    finally:
        with _busy.get_lock():
            _busy.value -= 1
    worker.emit(Event(label=job.unit.label, kind="finished", status=result.status))
    return result.model_copy(update={"node": node, "attempts": 1})


class LocalExecutor:
    def __init__(self, jobs: int, verbose: bool = False) -> None:
        self.jobs = max(1, jobs)
        self.verbose = verbose

    def describe(self, units: int) -> str:
        return f"{min(self.jobs, units)} worker process(es)"

    def run(self, todo: list[UnitPlan], folder: Path, cache: Cache, events: EventSink,
            done: Callable[[WorkerResult], None]) -> None:
        jobs = min(self.jobs, len(todo))
        ctx = multiprocessing.get_context("spawn")  # never fork a process that may hold torch threads
        channel = ctx.Queue()
        busy = ctx.Value("i", 0)
        stop = threading.Event()

        def drain() -> None:
            while not stop.is_set():
                try:
                    event = channel.get(timeout=0.2)
                except queue.Empty:
                    continue
                except (EOFError, OSError):
                    return
                events(event)

        reader = threading.Thread(target=drain, daemon=True)
        reader.start()
        log_dir = None if self.verbose else str(cache.log_dir)
        try:
            # Workers write into the local cache (a shared one's local mirror); the driver publishes.
            with ProcessPoolExecutor(max_workers=jobs, mp_context=ctx, initializer=_init_worker,
                                     initargs=(channel, log_dir, busy, self.jobs)) as pool:
                futures = {pool.submit(_build, WorkerJob(unit=u, cache=str(cache.root), folder=str(folder),
                                                         log_dir=log_dir)): u.program_key for u in todo}
                for fut in as_completed(futures):
                    try:
                        result = fut.result()
                    except BrokenProcessPool:
                        result = WorkerResult(key=futures[fut], status="failed", step="build",
                                              error="the worker process died (killed, or crashed in native code)")
                    done(result)
        finally:
            stop.set()
            reader.join(timeout=2)
            while True:  # what arrived after the reader's last poll
                try:
                    events(channel.get_nowait())
                except (queue.Empty, EOFError, OSError):
                    break
