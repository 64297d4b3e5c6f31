"""What `deployc profile` measured of one program: per operator and delegate call, from ETDump. The
profiler makes these; the HTML report and the views show them."""

from __future__ import annotations

from typing import Literal

from deployc.core.records import Frozen


class OperatorTime(Frozen):
    name: str
    kind: Literal["operator", "delegate", "delegate op"]  # a kernel outside delegates, a delegate call, inside one
    calls: int  # per call of the method
    median_ms: float  # its time in one call of the method (all its calls), median over the timed calls
    share: float  # of the method call's median wall time
    source: list[str] = []  # with an ETRecord: the model's modules it ran for (operators outside delegates)


class TraceEvent(Frozen):
    name: str
    kind: str
    call: int  # which timed call of the method
    start_us: float  # from the first timed call's first event
    duration_us: float


class ProgramProfile(Frozen):
    program: str
    backend: str
    method: str = "forward"
    status: Literal["profiled", "not-run", "failed"]
    reason: str = ""
    ran_on: str = ""
    runs: int = 0
    dims: dict[str, int] = {}  # the self-test case it ran on
    call_ms: float | None = None  # median wall time of one call of the method
    operators: list[OperatorTime] = []
    etdump: str | None = None  # the ETDump file kept (--etdump-dir)
    etrecord: str | None = None  # the program's ETRecord it was read with (--etrecord-dir)
    etrecord_note: str = ""  # how the ETDump's events mapped onto the ETRecord's graph, or why none was used
    trace: list[TraceEvent] = []
