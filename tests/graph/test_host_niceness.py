"""The children that run an emulator's programs yield the cores to the build's lowering: the verifier of a QNN
unit (and the embed worker of an NPU index) take the backend's host_niceness; a CPU backend's stay as they are.
benchmarks/emulator_niceness.py measures why."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from deployc.graph.host_runtime import NICENESS_ENV, child_env
from deployc.graph.verify import start_verifier
from deployc.targets.backends import BACKENDS


def _niceness(pid: int) -> int:
    stat = open(f"/proc/{pid}/stat").read()  # noqa: SIM115 - one read
    return int(stat.rsplit(")", 1)[1].split()[16])  # field 19: nice


def test_the_backends_that_emulate_are_the_ones_that_yield() -> None:
    assert BACKENDS["qnn"].host_niceness == 10
    assert BACKENDS["xnnpack"].host_niceness == 0
    assert child_env(0) == {}
    assert child_env(10) == {NICENESS_ENV: "10"}


def test_a_qnn_units_verifier_runs_at_the_backends_niceness() -> None:
    base = os.nice(0)
    verifier = start_verifier(BACKENDS["qnn"].host_niceness)  # it waits on stdin for its job
    try:
        deadline = time.monotonic() + 60
        while _niceness(verifier.pid) != base + 10 and time.monotonic() < deadline and verifier.poll() is None:
            time.sleep(0.1)
        assert _niceness(verifier.pid) == base + 10
    finally:
        verifier.kill()
        verifier.wait()
    plain = start_verifier(BACKENDS["xnnpack"].host_niceness)
    try:
        time.sleep(1.0)
        assert _niceness(plain.pid) == base
    finally:
        plain.kill()
        plain.wait()


def test_the_niceness_is_taken_once_not_handed_on() -> None:
    code = ("import os; from deployc.graph.host_runtime import take_niceness; take_niceness(); "
            f"print(os.nice(0), {NICENESS_ENV!r} in os.environ)")
    out = subprocess.run([sys.executable, "-c", code], env={**os.environ, NICENESS_ENV: "5"}, capture_output=True,
                         text=True, check=True).stdout.split()
    assert out == [str(os.nice(0) + 5), "False"]
