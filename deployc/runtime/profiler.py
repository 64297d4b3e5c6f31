"""`deployc profile`: where a program's time goes, per operator and per delegate call, measured by
ExecuTorch's event tracer (ETDump) while the program runs on its self-test inputs on this host.

Host numbers: this machine's ExecuTorch runtime (an NPU program: the HTP emulator on x86), not the
device's. They rank a program's operators against each other; they do not predict a phone's latency.
"""

from __future__ import annotations

import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from deployc.core import self_test_vectors
from deployc.core.layout import RUNTIME_JSON
from deployc.core.program_profile import OperatorTime, ProgramProfile, TraceEvent
from deployc.runtime import profile_worker
from deployc.targets.backends import BACKENDS

PROFILE_TIMEOUT_S = 900
_INSTANCE = re.compile(r"\s*#\d+$")  # XNNPACK numbers each operator instance: "Fully Connected (NC, F32) GEMM #2"


def _ran_on(backend: str, runner: Path | None) -> str:
    by = " through deployc-runner (C++)" if runner else ""
    if backend == "qnn":
        return f"the QNN HTP emulator on this x86 host{by} (host numbers, not a phone's)"
    return f"this x86 host's ExecuTorch runtime{by} (host numbers, not the device's)"


def profile_bundle(folder: Path, program: str | None, runs: int, etdump_dir: Path | None,
                   etrecord_dir: Path | None = None, runner: Path | None = None) -> list[ProgramProfile]:
    """runner: a deployc-runner (deployc native build) runs the programs instead of the Python runtime."""
    config = json.loads((folder / RUNTIME_JSON).read_text())
    vectors = {a["name"]: a["file"] for a in config.get("assets", []) if a["kind"] == "self_test"}
    programs = [p for p in config["programs"] if program is None or p["name"] == program]
    out = []
    for p in programs:
        base = ProgramProfile(program=p["name"], backend=p["backend"], status="not-run")
        here = BACKENDS[p["backend"]].runs_here(os.environ) if p["backend"] in BACKENDS else None
        file = vectors.get(f"{p['name']}.self_test")
        if p["file"].endswith(".tflite"):
            out.append(base.model_copy(update={"reason": "a LiteRT program: ETDump is ExecuTorch's event tracer"}))
        elif here is None or not here.usable:
            why = here.reason if here is not None else f"unknown backend {p['backend']}"
            out.append(base.model_copy(update={"reason": f"not run on this host: {why}"}))
        elif file is None:
            out.append(base.model_copy(update={"reason": "no self-test vectors in the bundle to run it on"}))
        elif runner is not None and p.get("static_decoder"):
            why = ("deployc-runner --etdump runs one method; a static decoder's forward is its driver's "
                   "(profile it without --runner)")
            out.append(base.model_copy(update={"reason": why}))
        else:
            record = _etrecord(etrecord_dir, p) if etrecord_dir is not None else None
            out.append(_profile(folder, p, folder / file, runs, etdump_dir, base, record, runner))
    return out


def _etrecord(directory: Path, p: dict[str, Any]) -> Path | str:
    """The program's ETRecord in `directory` (deployc build --etrecord DIR/<target>), or why not."""
    record = directory / f"{p['name']}.etrecord"
    about = record.with_name(record.name + ".json")
    if not record.is_file() or not about.is_file():
        return f"no {record.name} (and its .json) in {directory}"
    made_for = json.loads(about.read_text()).get("program_sha256")
    if made_for != p["sha256"]:
        return (f"{record} was recorded for another program (sha256 {str(made_for)[:12]}, this bundle's "
                f"{p['sha256'][:12]}): not used")
    return record


def _profile(folder: Path, p: dict[str, Any], vectors: Path, runs: int, etdump_dir: Path | None,
             base: ProgramProfile, record: Path | str | None, runner: Path | None) -> ProgramProfile:
    cases = self_test_vectors.read(vectors)
    forward = [i for i, c in enumerate(cases) if c["method"] == "forward" and "target" not in c and "task" not in c]
    if not forward:
        return base.model_copy(update={"reason": "its self-test vectors hold no forward call"})
    case = forward[len(forward) // 2]  # the middle verification point
    with tempfile.TemporaryDirectory(prefix="deployc-profile-") as tmp:
        etdump = (etdump_dir or Path(tmp)) / f"{p['name']}.etdp"
        etdump.parent.mkdir(parents=True, exist_ok=True)
        data = str(folder / p["data_file"]) if p.get("data_file") else "-"
        env = {**os.environ, **BACKENDS[p["backend"]].child_env()}
        if runner is None:
            cmd = [sys.executable, "-m", profile_worker.__name__, str(folder / p["file"]), data, str(vectors),
                   str(case), "forward", str(runs), str(etdump)]
            warmups = 1  # the worker's warm-up call
        else:
            cmd = [str(runner), str(folder), "--program", p["name"], "--repeat", str(runs + 1), "--etdump", str(etdump),
                   *_npy_inputs(cases[case], Path(tmp))]
            warmups = 1 + int(p.get("warmup", 0))  # and the calls the runner makes when it loads the program
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=PROFILE_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            return base.model_copy(update={"status": "failed",
                                           "reason": f"did not finish within {PROFILE_TIMEOUT_S} s"})
        if proc.returncode != 0:
            from deployc.graph.verify import crash_reason

            return base.model_copy(update={"status": "failed", "reason": crash_reason(proc.stderr, proc.returncode)})
        # The worker times each call; the runner's median includes its first call, so there the ETDump's own
        # Method::execute spans give the call's time.
        timed = [float(line.split()[1]) for line in proc.stdout.splitlines() if line.startswith("call ")][1:]
        operators, trace, call_ms = summarize_etdump(etdump.read_bytes(), p["backend"],
                                                     statistics.median(timed) if timed else None, warmups)
        etdump.with_name(etdump.name + ".debug").unlink(missing_ok=True)
        recorded: dict[str, Any] = {}
        if isinstance(record, Path):
            sources, note = graph_sources(etdump, record)
            operators = [o.model_copy(update={"source": sources.get(o.name, [])}) for o in operators]
            recorded = {"etrecord": str(record), "etrecord_note": note}
        elif record is not None:
            recorded = {"etrecord_note": record}
    return base.model_copy(update={**recorded,
        "status": "profiled", "ran_on": _ran_on(p["backend"], runner), "runs": runs, "dims": cases[case]["dims"],
        "call_ms": round(call_ms, 4), "operators": operators, "trace": trace,
        "etdump": str(etdump) if etdump_dir else None})


def _events(run: Any, backend: str) -> list[tuple[str, str, int, int]]:
    """(name, kind, start ns, duration ns) of one method call's events: kernel calls, delegate calls, and
    the operators a delegate reports from inside (XNNPACK's, by its own names)."""
    out = []
    for event in run.events or []:
        e = event.profile_event
        if e is None:
            continue
        if e.name and e.name.startswith("native_call_"):
            out.append((e.name.removeprefix("native_call_"), "operator", e.start_time, e.end_time - e.start_time))
        elif e.name == "DELEGATE_CALL":
            out.append((f"{backend} delegate (instruction {e.instruction_id})", "delegate", e.start_time,
                        e.end_time - e.start_time))
        elif not e.name and e.delegate_debug_id_str:
            out.append((_INSTANCE.sub("", e.delegate_debug_id_str), "delegate op", e.start_time,
                        e.end_time - e.start_time))
    return out


def summarize_etdump(blob: bytes, backend: str, call_ms: float | None, warmups: int = 1
                     ) -> tuple[list[OperatorTime], list[TraceEvent], float]:
    """Per operator / delegate call: calls per method call, median time per method call, share of the
    call's wall time (`call_ms`; None: the median of the ETDump's Method::execute spans); the timed calls'
    events for a trace; the call time used. The first `warmups` method calls are left out."""
    from executorch.devtools.etdump.serialize import deserialize_from_etdump_flatcc

    dump = deserialize_from_etdump_flatcc(blob)
    executed = [r for r in dump.run_data if r.name == "Execute"]  # one block per method call; "Default": loading
    if call_ms is None:
        spans = [(e.profile_event.end_time - e.profile_event.start_time) / 1e6 for r in executed[warmups:]
                 for e in r.events or [] if e.profile_event and e.profile_event.name == "Method::execute"]
        call_ms = statistics.median(spans) if spans else 0.0
    timed = [_events(r, backend) for r in executed[warmups:]]
    totals: dict[tuple[str, str], list[float]] = {}
    counts: dict[tuple[str, str], list[int]] = {}
    for events in timed:
        per_call: dict[tuple[str, str], tuple[float, int]] = {}
        for name, kind, _, duration in events:
            ms, n = per_call.get((name, kind), (0.0, 0))
            per_call[(name, kind)] = (ms + duration / 1e6, n + 1)
        for key, (ms, n) in per_call.items():
            totals.setdefault(key, []).append(ms)
            counts.setdefault(key, []).append(n)
    operators = []
    for (name, kind), spent in totals.items():
        every = spent + [0.0] * (len(timed) - len(spent))  # a call that did not reach it spent nothing in it
        median = statistics.median(every)
        operators.append(OperatorTime.model_validate({
            "name": name, "kind": kind, "calls": int(statistics.median(counts[(name, kind)])),
            "median_ms": round(median, 4), "share": round(median / call_ms, 4) if call_ms > 0 else 0.0}))
    operators.sort(key=lambda o: (-o.median_ms, o.name))
    origin = min((start for events in timed for _, _, start, _ in events), default=0)
    trace = [TraceEvent(name=name, kind=kind, call=i, start_us=(start - origin) / 1e3, duration_us=duration / 1e3)
             for i, events in enumerate(timed) for name, kind, start, duration in events]
    return operators, trace, call_ms


def graph_sources(etdump: Path, etrecord: Path) -> tuple[dict[str, list[str]], str]:
    """ExecuTorch's Inspector reads the pair (what Model Explorer's ETDump overlay does): for each kernel
    outside delegates, the model's modules it ran for; and how many timed events map onto graph nodes."""
    from executorch.devtools import Inspector

    inspector = Inspector(etdump_path=str(etdump), etrecord=str(etrecord))
    sources: dict[str, set[str]] = {}
    mapped = total = 0
    for block in inspector.event_blocks:
        if block.name != "Execute":
            continue
        for event in block.events:
            if event.name in ("Method::execute", "OPERATOR_CALL"):
                continue
            total += 1
            if event.op_types:
                mapped += 1
            if event.name.startswith("native_call_"):
                for hierarchy in (event.module_hierarchy or {}).values():
                    path = max((where for where, _ in hierarchy.values()), key=len, default="")
                    sources.setdefault(event.name.removeprefix("native_call_"), set()).add(path or "(model)")
    note = (f"{mapped} of {total} events map onto the ETRecord's graph" if total else "no events to map")
    if mapped < total:
        note += " (a delegate's own operators are named by the delegate, not by graph node)"
    return {name: sorted(paths) for name, paths in sources.items()}, note


def _npy_inputs(case: dict[str, Any], folder: Path) -> list[str]:
    """--input arguments for deployc-runner: the case's inputs as .npy files."""
    import numpy as np

    args = []
    for i, t in enumerate(case["inputs"]):
        path = folder / f"input_{i}.npy"
        np.save(path, self_test_vectors.decode_tensor(t))
        args += ["--input", str(path)]
    return args


def chrome_trace(profiles: list[ProgramProfile]) -> dict[str, Any]:
    """The timed calls as a Chrome trace (chrome://tracing, Perfetto): one process per program, one
    thread per kind of event. Times are this host's."""
    events: list[dict[str, Any]] = []
    kinds = {"delegate": 1, "operator": 2, "delegate op": 3}
    for pid, p in enumerate(profiles, 1):
        events.append({"name": "process_name", "ph": "M", "pid": pid, "args": {"name": f"{p.program} ({p.ran_on})"}})
        for kind, tid in kinds.items():
            events.append({"name": "thread_name", "ph": "M", "pid": pid, "tid": tid, "args": {"name": kind}})
        events += [{"name": e.name, "cat": e.kind, "ph": "X", "pid": pid, "tid": kinds[e.kind],
                    "ts": round(e.start_us, 3), "dur": round(e.duration_us, 3), "args": {"call": e.call}}
                   for e in p.trace]
    return {"traceEvents": events, "displayTimeUnit": "ms",
            "otherData": {"note": "deployc profile: host numbers (this machine's runtime), not the device's"}}
