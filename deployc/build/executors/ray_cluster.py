"""The Ray executor: every unit of the plan becomes one Ray task.

The manifest's folder travels to the workers as the job's working_dir (model code, checkpoints,
calibration data), so the nodes need only the same Python environment, not the project checkout.
A worker builds its unit and either publishes it to the shared cache (an fsspec URL every node can
reach) and returns the key, or returns the entry's files, which the driver checks against their
sha256 and stores. A worker process that dies mid-unit is retried by Ray (MAX_RETRIES); a unit that
fails for a reason of its own (an export error) returns its failure as data, so Ray never retries it.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import os
import socket
import tempfile
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager, redirect_stdout
from pathlib import Path
from typing import Any

from deployc.build.cache import Cache
from deployc.build.results import Node, WorkerJob, WorkerResult
from deployc.core.digests import file_sha256
from deployc.core.errors import BuildError, UsageError
from deployc.core.events import Event, EventSink
from deployc.plan.build_plan import UnitPlan

MAX_RETRIES = 3  # attempts after the first, for worker processes that die (OOM killer, node loss)
INSTALL_HINT = ("--executor ray needs Ray, which is not installed: pip install 'deployc[ray]' "
                "(use the Ray version your cluster runs)")
CONNECT_TIMEOUT_S = 10
# Never shipped to workers: version control, environments, caches, build outputs.
EXCLUDES = [".git", ".venv", "venv", "__pycache__", "node_modules", "dist", ".deployc-cache", "*.pte", "*.tar.gz"]
# Offline switches the workers must honour as the driver does.
PASSED_ENV = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "DEPLOYC_CACHE_MIRROR")


@contextmanager
def _stderr_to(log: Path) -> Iterator[None]:
    log.parent.mkdir(parents=True, exist_ok=True)
    saved = os.dup(2)
    with open(log, "a") as f:
        os.dup2(f.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)


def import_ray() -> Any:
    try:
        import ray
    except ImportError as exc:
        raise UsageError(INSTALL_HINT) from exc
    return ray


def _installed() -> bool:
    try:
        return importlib.util.find_spec("ray") is not None
    except (ImportError, ValueError):  # a module set to None in sys.modules, a broken install
        return False


def _node(ray: Any) -> Node:
    ctx = ray.get_runtime_context()
    return Node(executor="ray", node_id=ctx.get_node_id(), address=ray.util.get_node_ip_address(),
                host=socket.gethostname(), pid=os.getpid())


def build_unit_task(unit: UnitPlan, shared_cache: str | None, events: Any) -> WorkerResult:
    """Runs on a Ray worker. Its working directory is the manifest folder that Ray unpacked."""
    import ray

    from deployc.build import program_job
    from deployc.graph import worker

    node = _node(ray)

    def emit(event: Event) -> None:
        # Fire and forget: a task blocked in ray.get() lends its CPU to another task, oversubscribing the node.
        events.actor.put_nowait.remote(event)

    # Every attempt starts with this event: the driver counts them, so retries are known from data.
    emit(Event(label=unit.label, kind="started", where=f"node {(node.node_id or '')[:12]} (pid {node.pid})"))
    worker.set_event_sink(emit)
    # Ray's worker logs keep what the libraries print (log_dir None): the node's log directory.
    job = WorkerJob(unit=unit, cache=shared_cache or "", folder=os.getcwd(), log_dir=None)
    if shared_cache is not None:  # a shared cache every node reaches: publish there, return the key
        result = program_job.build_program(job)
    else:
        with tempfile.TemporaryDirectory(prefix="deployc-ray-unit-") as tmp:
            result = program_job.build_program(job.model_copy(update={"cache": tmp}))
            if result.status == "built":
                entry, _ = Cache(Path(tmp)).get(result.key)
                if entry is None:
                    raise RuntimeError("the unit's entry vanished from the worker's cache")
                result = result.model_copy(update={"files": {
                    name: (entry.file(name).read_bytes(), str(info["sha256"])) for name, info in entry.files.items()}})
    emit(Event(label=unit.label, kind="finished", status=result.status, where=f"node {(node.node_id or '')[:12]}"))
    return result.model_copy(update={"node": node})


def _store_returned(cache: Cache, unit: UnitPlan, files: dict[str, tuple[bytes, str]]) -> None:
    key = unit.program_key
    with cache.lock(key):
        if cache.get(key)[0] is not None:
            return
        staging = cache.tmp_dir()
        for name, (data, sha256) in files.items():
            (staging / name).write_bytes(data)
            if file_sha256(staging / name) != sha256:
                raise BuildError(f"{unit.label}: {name} arrived from the Ray worker damaged")
        cache.put(key, staging, unit.slug)


def _check_reachable(address: str) -> None:
    """Fail in seconds on a wrong address: ray.init() retries an unreachable GCS for minutes."""
    host, sep, port = address.rpartition(":")
    if not sep or "://" in address or not port.isdigit():
        return  # "auto", "ray://..." (Ray Client): Ray's own checks apply
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=CONNECT_TIMEOUT_S).close()
    except OSError as exc:
        raise BuildError(f"cannot reach the Ray cluster at {address}: {exc.strerror or exc} "
                         f"(is the head node running, and is this its GCS address?)") from exc


def _shareable(cache: Cache) -> bool:
    """Whether workers on other processes (and nodes) can reach the cache themselves."""
    if cache.shared is None:
        return False
    protocol = cache.shared.fs.protocol
    return "memory" not in (protocol if isinstance(protocol, tuple) else (protocol,))


class RayExecutor:
    def __init__(self, address: str | None, jobs: int) -> None:
        if not _installed():  # said before any planning or building, not after
            raise UsageError(INSTALL_HINT)
        self.address = address or os.environ.get("RAY_ADDRESS") or None
        self.jobs = max(1, jobs)  # CPUs of a cluster started for this build
        cpus = os.environ.get("DEPLOYC_RAY_CPUS_PER_UNIT", "1")
        if not cpus.isdigit() or int(cpus) < 1:
            raise UsageError(f"DEPLOYC_RAY_CPUS_PER_UNIT={cpus!r}: expected a whole number of CPUs, 1 or more")
        self.cpus_per_unit = int(cpus)

    def describe(self, units: int) -> str:
        where = f"the Ray cluster at {self.address}" if self.address else f"a local Ray cluster ({self.jobs} CPU(s))"
        return f"Ray tasks on {where}"

    def _connect(self, ray: Any, folder: Path, out_dirs: list[str], log: Path) -> None:
        # Ray skips files named in .gitignore by default; checkpoints and datasets often are.
        os.environ.setdefault("RAY_RUNTIME_ENV_IGNORE_GITIGNORE", "1")
        env = {k: os.environ[k] for k in PASSED_ENV if k in os.environ}
        runtime_env = {"working_dir": str(folder), "excludes": EXCLUDES + out_dirs,
                       "env_vars": env}
        common = {"runtime_env": runtime_env, "log_to_driver": False, "logging_level": "ERROR",
                  "configure_logging": True}
        if self.address:
            _check_reachable(self.address)
        try:
            with _stderr_to(log):  # Ray's core writes start-up notes straight to file descriptor 2
                if self.address:
                    ray.init(address=self.address, **common)
                else:
                    ray.init(address="local", num_cpus=self.jobs, include_dashboard=False, **common)
        except (ConnectionError, TimeoutError, RuntimeError, ValueError) as exc:
            where = self.address or "a local cluster"
            raise BuildError(f"cannot start Ray tasks on {where}: {str(exc).splitlines()[0][:300]}") from exc

    def run(self, todo: list[UnitPlan], folder: Path, cache: Cache, events: EventSink,
            done: Callable[[WorkerResult], None]) -> None:
        ray = import_ray()
        from ray.util.queue import Empty, Queue

        folder = folder.resolve()
        out_dirs = [p.relative_to(folder).as_posix() for p in (cache.root.resolve(),) if p.is_relative_to(folder)]
        log = cache.root / "logs" / "ray-driver.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        # Ray's driver prints cluster notices ("a worker died ...") on sys.stdout, where --json writes its
        # document: they go to the log; what they mean reaches the user as retries and failures.
        with open(log, "a") as notices, redirect_stdout(notices):
            self._connect(ray, folder, out_dirs, log)
            self._run_connected(ray, Empty, Queue, todo, cache, events, done)

    def _run_connected(self, ray: Any, Empty: Any, Queue: Any, todo: list[UnitPlan], cache: Cache,
                       events: EventSink, done: Callable[[WorkerResult], None]) -> None:
        attempts: dict[str, int] = {}
        stop = threading.Event()

        def show(event: Event) -> None:
            if event.kind == "started":
                attempts[event.label] = attempts.get(event.label, 0) + 1
                event = dataclasses.replace(event, attempt=attempts[event.label], max_attempts=MAX_RETRIES + 1)
            events(event)

        try:
            channel = Queue(actor_options={"num_cpus": 0})

            def drain() -> None:
                while not stop.is_set():
                    try:
                        show(channel.get(timeout=0.5))
                    except Empty:
                        continue
                    except Exception:  # the cluster went away; the task results say what happened
                        return

            reader = threading.Thread(target=drain, daemon=True)
            reader.start()
            task = ray.remote(num_cpus=self.cpus_per_unit, max_retries=MAX_RETRIES,
                              retry_exceptions=False)(build_unit_task)
            spec = cache.spec if _shareable(cache) else None
            units = {u.program_key: u for u in todo}
            refs = {task.options(name=f"deployc:{u.label}").remote(u, spec, channel): key
                    for key, u in units.items()}
            pending = list(refs)
            while pending:
                ready, pending = ray.wait(pending, num_returns=1)
                key = refs[ready[0]]
                result = self._collect(ray, ready[0], units[key], cache)
                # A retry's "started" event comes before its result; the reader passes it on within 0.5 s.
                done(result.model_copy(update={"attempts": max(1, attempts.get(units[key].label, 1))}))
            stop.set()
            reader.join()
            for event in channel.get_nowait_batch(channel.qsize()):  # what arrived after the last poll
                show(event)
        finally:
            stop.set()
            ray.shutdown()

    def _collect(self, ray: Any, ref: Any, unit: UnitPlan, cache: Cache) -> WorkerResult:
        key = unit.program_key
        try:
            result: WorkerResult = ray.get(ref)
        except ray.exceptions.RayTaskError as exc:  # our code raised on the worker: a bug, not retried
            cause = exc.cause if exc.cause is not None else exc
            return WorkerResult(key=key, status="failed", step="build",
                                error=f"the Ray task raised {type(cause).__name__}: {str(cause)[:400]}")
        except ray.exceptions.RayError as exc:
            return WorkerResult(key=key, status="failed", step="build",
                                error=f"the Ray worker died {MAX_RETRIES + 1} times (killed, out of memory or a lost "
                                      f"node); Ray gave up: {str(exc).splitlines()[0][:300]}")
        if result.files is not None:
            files, result = result.files, result.model_copy(update={"files": None})
            try:
                _store_returned(cache, unit, files)
            except BuildError as exc:
                return result.model_copy(update={"status": "failed", "step": "transfer", "error": str(exc)})
        return result
