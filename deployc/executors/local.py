"""The local executor: a pool of spawned worker processes, one unit at a time each."""

from __future__ import annotations

import multiprocessing
import os
import queue
import socket
import threading
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path
from typing import Any

from deployc.cache import Cache
from deployc.executors import Progress, payload
from deployc.graph import program_builder
from deployc.plan import UnitPlan
from deployc.project import Project


def _init_worker(events: Any, threads: int, log_dir: str) -> None:
    """Pool initializer. The libraries' import-time chatter goes to a log file, not the user's terminal;
    failures reach the user through the result dicts."""
    Path(log_dir).mkdir(parents=True, exist_ok=True)
    log = open(Path(log_dir) / f"worker-{os.getpid()}.log", "a")  # noqa: SIM115 - lives as long as the worker
    os.dup2(log.fileno(), 1)
    os.dup2(log.fileno(), 2)
    program_builder.set_event_sink(lambda label, step: events.put((label, step)))
    program_builder.set_threads(threads)


def _build(p: dict[str, Any]) -> dict[str, Any]:
    result = program_builder.build_program(p)
    result["node"] = {"executor": "local", "host": socket.gethostname(), "pid": os.getpid()}
    result["attempts"] = 1
    return result


class LocalExecutor:
    def __init__(self, jobs: int) -> None:
        self.jobs = max(1, jobs)

    def describe(self, units: int) -> str:
        return f"{min(self.jobs, units)} worker process(es)"

    def run(self, todo: list[UnitPlan], project: Project, cache: Cache,
            progress: Progress) -> dict[str, dict[str, Any]]:
        jobs = min(self.jobs, len(todo))
        ctx = multiprocessing.get_context("spawn")  # never fork a process that may hold torch threads
        events = ctx.Queue()
        stop = threading.Event()

        def drain() -> None:
            while not stop.is_set():
                try:
                    label, step = events.get(timeout=0.2)
                except queue.Empty:
                    continue
                except (EOFError, OSError):
                    return
                progress(f"  {label}: {step}")

        reader = threading.Thread(target=drain, daemon=True)
        reader.start()
        threads = max(1, (os.cpu_count() or 1) // jobs)
        folder = str(project.folder.resolve())
        results: dict[str, dict[str, Any]] = {}
        try:
            # Workers write into the local cache (a shared one's local mirror); the driver publishes.
            with ProcessPoolExecutor(max_workers=jobs, mp_context=ctx, initializer=_init_worker,
                                     initargs=(events, threads, str(cache.root / "logs"))) as pool:
                futures = {u.program_key: pool.submit(_build, payload(u, str(cache.root), folder)) for u in todo}
                for key, fut in futures.items():
                    try:
                        results[key] = fut.result()
                    except BrokenProcessPool:
                        results[key] = {"key": key, "status": "failed", "step": "build",
                                        "error": "the worker process died (killed, or crashed in native code)"}
        finally:
            stop.set()
            reader.join(timeout=2)
        return results
