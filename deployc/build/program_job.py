"""One WorkerJob in a worker process: the cache locked, re-checked and filled around graph.worker's build.

A program that builds is cached with its facts, including a verification that missed its tolerance; a
step that raises is reported as failed and nothing is cached."""

from __future__ import annotations

import shutil
from pathlib import Path

from deployc.build.cache import open_cache
from deployc.build.results import WorkerJob, WorkerResult
from deployc.core.errors import BuildError
from deployc.core.events import Event
from deployc.core.faults import fault_point
from deployc.graph import worker


def build_program(job: WorkerJob) -> WorkerResult:
    """Build `job.unit`'s program into the cache unless it is there already."""
    unit = job.unit
    cache = open_cache(job.cache)
    key = unit.program_key
    with cache.lock(key):
        entry, warning = cache.get(key)  # re-check: another process may have built it meanwhile
        if entry is not None:
            return WorkerResult(key=key, status="cached", warning=warning)
        staging = cache.tmp_dir()
        step = "load"

        def at(s: str) -> None:
            nonlocal step
            step = s
            worker.emit(Event(label=unit.label, kind="step", step=s))

        log_file = Path(job.log_dir) / f"{unit.slug}.log" if job.log_dir else None
        log = str(log_file) if log_file else None
        try:
            worker.build_into(unit, Path(job.folder), staging, at, log_file)
            fault_point("cache-write")
            cache.put(key, staging, unit.slug)
        except BuildError as exc:
            shutil.rmtree(staging, ignore_errors=True)
            return WorkerResult(key=key, status="failed", step=step, error=str(exc), dim=getattr(exc, "dim", None),
                                warning=warning, log=log)
        except Exception as exc:  # model code can raise anything; it is the unit's failure, not ours
            shutil.rmtree(staging, ignore_errors=True)
            return WorkerResult(key=key, status="failed", step=step, error=f"{type(exc).__name__}: {str(exc)[:500]}",
                                warning=warning, log=log)
    return WorkerResult(key=key, status="built", warning=warning)
