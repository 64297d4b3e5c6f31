"""The preprocess of a backend's partitions shared with forked processes (deployc/graph/preprocess.py): results
in the partitions' order whichever process made them, a child's failure or hang redone here, this process's failure
raised with its children reaped, and XNNPACK's programs the same bytes with a spare process as without. Fresh
processes: the share forks, and ExecuTorch's default is wrapped process-wide while it runs."""

from __future__ import annotations

import multiprocessing
import subprocess
import sys

from helpers.projects import REPO

from deployc.graph import preprocess

RUN = """
import os, sys
from deployc.graph import preprocess

home = os.getpid()

class Program:  # what `run` measures a job by: its graph's nodes
    def __init__(self, n):
        self.graph = type("G", (), {"nodes": range(n + 1)})()

jobs = [(Program(n), n) for n in range(7)]
made = preprocess.run(lambda program, n: (n, os.getpid()), jobs, 2)
assert [n for n, _ in made] == list(range(7)), made
assert {pid for _, pid in made} - {home}, "no child made any"

def fails_in_children(program, n):
    if os.getpid() != home:
        raise RuntimeError("a child's failure")
    return n
assert preprocess.run(fails_in_children, jobs, 3) == list(range(7))

def hangs_in_children(program, n):  # a child stuck past its patience: killed, its share made here
    if os.getpid() != home:
        import time
        time.sleep(3600)
    return n
preprocess.PATIENCE_S = 1.0
assert preprocess.run(hangs_in_children, jobs, 2) == list(range(7))

def fails_here(program, n):
    if os.getpid() == home:
        raise ValueError("here")
    return n
try:
    preprocess.run(fails_here, jobs, 2)
except ValueError:
    pass
else:
    raise AssertionError("this process's failure was not raised")
try:
    os.waitpid(-1, os.WNOHANG)
except ChildProcessError:
    pass
else:
    raise AssertionError("a child was left")
print("ran")
"""

LOWER = """
import hashlib, torch
from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
from executorch.exir import to_edge_transform_and_lower
from deployc.graph import preprocess

class Split(torch.nn.Module):  # linears between cumulative sums, which XNNPACK declines: 3 partitions
    def __init__(self):
        super().__init__()
        self.a, self.b, self.c = (torch.nn.Linear(8, 8) for _ in range(3))
    def forward(self, x):
        return self.c(torch.cumsum(self.b(torch.cumsum(self.a(x), 1)), 1))

class Other(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = torch.nn.Linear(8, 4), torch.nn.Linear(4, 4)
    def forward(self, x):
        return self.b(torch.cumsum(torch.relu(self.a(x)), 1))

def lowered(spare):
    torch.manual_seed(0)
    with torch.no_grad():
        programs = {"forward": torch.export.export(Split().eval(), (torch.randn(2, 8),)),
                    "other": torch.export.export(Other().eval(), (torch.randn(2, 8),))}
    preprocess.set_spare(lambda: spare)
    with preprocess.shared("XnnpackBackend"):
        program = to_edge_transform_and_lower(programs, partitioner=[XnnpackPartitioner()]).to_executorch()
    return hashlib.sha256(program.buffer).hexdigest()

processes = []
original = preprocess.run
def run(pre, jobs, count):
    processes.append((len(jobs), len(preprocess.shares([1] * len(jobs), count))))
    return original(pre, jobs, count)
preprocess.run = run
alone = lowered(0)
assert processes == [], processes
assert lowered(1) == alone
assert processes == [(5, 2)], processes  # five partitions over both methods, in two processes
from executorch.exir.backend.backend_details import BackendDetails
assert BackendDetails.preprocess_multimethod.__func__.__name__ == "preprocess_multimethod"  # restored
from deployc.targets.backends import BACKENDS
assert BACKENDS["xnnpack"].forked_preprocess == "XnnpackBackend" and not BACKENDS["vulkan"].forked_preprocess
print("same")
"""


def _python(script: str) -> str:
    done = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_shares_are_balanced_and_keep_each_job_once() -> None:
    parts = preprocess.shares([9, 1, 5, 5, 4, 2], 2)
    assert sorted(i for p in parts for i in p) == list(range(6))
    loads = sorted(sum([9, 1, 5, 5, 4, 2][i] for i in p) for p in parts)
    assert loads == [13, 13]
    assert preprocess.shares([3], 4) == [[0]]  # never an empty share


def test_results_keep_their_order_and_failures_stay_correct() -> None:
    assert _python(RUN).strip().endswith("ran")


def test_xnnpack_programs_are_the_same_bytes_with_a_spare_process() -> None:
    assert _python(LOWER).strip().endswith("same")


def test_the_local_pool_offers_its_idle_workers() -> None:
    from deployc.build.executors import local
    from deployc.graph import worker

    busy = multiprocessing.get_context("spawn").Value("i", 0)
    try:
        local._init_worker(multiprocessing.get_context("spawn").Queue(), None, busy, 2)
        busy.value = 1
        assert preprocess._spare() == 1  # one unit building: the other worker's core is spare
        busy.value = 2
        assert preprocess._spare() == 0
    finally:
        preprocess.set_spare(preprocess._none)
        worker.set_event_sink(None)
