"""A backend's preprocess of a program's partitions, shared with forked processes.

ExecuTorch preprocesses the partitions of a lowering one after another (`preprocess_multimethod`), each on a
deep copy of its graph, into bytes that depend on that partition alone. Under XNNPACK that is a third of a
decoder's lowering (its passes retrace each partition with fake tensors): on SmolLM2's `gguf` graph cut to six
layers, 26 partitions, ~11 s of 32. With a core free, the partitions are split into balanced shares and all but
one share are preprocessed in forked children, which inherit the graphs (nothing to serialize on the way in) and
send back the results (bytes and the named data). A child that fails, or hangs (a lock another thread held at
the fork), leaves its share to this process, so the result is the sequential one in every case; the tests lower
with and without it and compare the bytes.

Forking a process that holds torch's OpenMP threads is safe only while the child never enters a parallel
region: children run on one intra-op thread, as the lowering itself does (worker._one_thread).
"""

from __future__ import annotations

import os
import pickle
import select
import signal
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

PATIENCE_S = 60.0  # the least a child is waited for after this process's share


def _none() -> int:
    return 0


# How many processes beside this one a lowering may fork now: the build's executor knows which of its
# processes are busy (none by default: a test, an ETRecord's rebuild, a Ray task preprocess in their own).
_spare: Callable[[], int] = _none


def set_spare(count: Callable[[], int]) -> None:
    global _spare
    _spare = count


def _cost(program: Any) -> int:
    """What a partition's preprocess costs, roughly: its passes retrace every node."""
    return sum(1 for _ in program.graph.nodes)


def shares(costs: list[int], count: int) -> list[list[int]]:
    """Job indices split into `count` shares of about equal cost (largest first, each to the lightest share)."""
    bins: list[list[int]] = [[] for _ in range(count)]
    loads = [0] * count
    for index in sorted(range(len(costs)), key=lambda i: (-costs[i], i)):
        lightest = loads.index(min(loads))
        bins[lightest].append(index)
        loads[lightest] += costs[index]
    return [sorted(b) for b in bins if b]


def _run_child(preprocess: Any, jobs: list[tuple[Any, Any]], share: list[int], write: int) -> None:
    import torch

    torch.set_num_threads(1)
    status = 1
    try:
        payload = pickle.dumps([(i, preprocess(*jobs[i])) for i in share], protocol=pickle.HIGHEST_PROTOCOL)
        with os.fdopen(write, "wb") as out:
            out.write(payload)
        status = 0
    finally:
        os._exit(status)  # no atexit handlers, no torch teardown: the parent owns those


def _read(read: int, deadline: float) -> bytes | None:
    """What a child sent, or None when it has not finished by `deadline` (time.monotonic)."""
    chunks: list[bytes] = []
    with os.fdopen(read, "rb", buffering=0) as pipe:
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([pipe], [], [], left)[0]:
                return None
            chunk = pipe.read(1 << 20)
            if not chunk:
                return b"".join(chunks)
            chunks.append(chunk)


def run(preprocess: Any, jobs: list[tuple[Any, Any]], processes: int) -> list[Any]:
    """`preprocess(program, compile_specs)` of every job, in order, in up to `processes` processes."""
    parts = shares([_cost(program) for program, _ in jobs], max(1, processes))
    if len(parts) < 2:
        return [preprocess(*job) for job in jobs]
    results: dict[int, Any] = {}
    children: list[tuple[int, int, list[int]]] = []
    for share in parts[1:]:
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(read)
            _run_child(preprocess, jobs, share, write)
        os.close(write)
        children.append((pid, read, share))
    start = time.monotonic()
    try:
        for i in parts[0]:
            results[i] = preprocess(*jobs[i])
    except BaseException:
        for pid, read, _ in children:  # they would wait on their pipes forever
            os.kill(pid, signal.SIGKILL)
            os.close(read)
            os.waitpid(pid, 0)
        raise
    # The shares cost about the same: a child still busy long after this process's share is stuck (a lock
    # some other thread held when it was forked), and its share is done here.
    deadline = time.monotonic() + max(PATIENCE_S, 3 * (time.monotonic() - start))
    for pid, read, share in children:
        payload = _read(read, deadline)
        if payload is None:
            os.kill(pid, signal.SIGKILL)
        _, status = os.waitpid(pid, 0)
        if status == 0 and payload:
            results.update(pickle.loads(payload))
        else:  # the child died, raised or hung: this process does its share, raising what preprocess raises
            results.update({i: preprocess(*jobs[i]) for i in share})
    return [results[i] for i in range(len(jobs))]


@contextmanager
def shared(backend_class: str) -> Iterator[None]:
    """Within it, ExecuTorch preprocesses the partitions of backend `backend_class` (the name of its
    BackendDetails subclass, which keeps ExecuTorch's default `preprocess_multimethod`) in this process and
    the spare ones forked beside it. The default is wrapped on BackendDetails itself: the backend's module may not be
    imported yet."""
    from executorch.exir.backend.backend_details import BackendDetails

    if not backend_class or not hasattr(os, "fork"):
        yield
        return
    default = BackendDetails.__dict__["preprocess_multimethod"]

    def multimethod(klass: Any, edge_programs: dict[str, list[Any]], compile_specs: dict[str, list[Any]]
                    ) -> dict[str, list[Any]]:
        spare = _spare()  # now: a worker busy when the lowering began may have finished since
        if klass.__name__ != backend_class or spare < 1:
            return default.__func__(klass, edge_programs, compile_specs)
        order = [(method, i) for method, programs in edge_programs.items() for i in range(len(programs))]
        jobs = [(edge_programs[m][i], compile_specs[m][i]) for m, i in order]
        done = run(klass.preprocess, jobs, spare + 1)
        out: dict[str, list[Any]] = {m: [] for m in edge_programs}
        for (m, _), result in zip(order, done, strict=True):
            out[m].append(result)
        return out

    BackendDetails.preprocess_multimethod = classmethod(multimethod)
    try:
        yield
    finally:
        BackendDetails.preprocess_multimethod = default
