"""`deployc profile`: per-operator and per-delegate-call times of a bundle's programs from ExecuTorch's
ETDump on this host, a Chrome trace, the ETDump files kept; programs that cannot run here say why."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import Built, run_subprocess


def test_profile_times_operators_and_delegate_calls(suite: Built, tmp_path: Path) -> None:
    bundle = suite.bundle("arduino_q")
    trace, dumps = tmp_path / "trace.json", tmp_path / "etdump"
    r = run_subprocess("profile", str(bundle), "--runs", "5", "--trace", str(trace), "--etdump-dir", str(dumps),
                       "--json")
    assert r.code == 0, r.err[-2000:]
    profiles = {p["program"]: p for p in json.loads(r.out)["profiles"]}
    # The MCU's program cannot run on this host's runtime: said, not timed.
    tiny = profiles["tiny"]
    assert (tiny["backend"], tiny["status"]) == ("cortex_m", "not-run") and tiny["reason"].startswith(
        "not run on this host:")
    assert {p["status"] for name, p in profiles.items() if name != "tiny"} == {"profiled"}
    p = profiles["encoder_8da4w"]
    assert p["program"] == "encoder_8da4w" and p["status"] == "profiled" and p["runs"] == 5
    assert "host numbers" in p["ran_on"] and p["call_ms"] > 0
    assert p["dims"]["seq"] in range(4, 33)
    kinds = {o["kind"] for o in p["operators"]}
    assert {"delegate", "operator", "delegate op"} <= kinds  # XNNPACK's own operators, from inside its calls
    names = {o["name"] for o in p["operators"]}
    assert any(n.startswith("xnnpack delegate (instruction ") for n in names)
    assert "embedding_4bit.out" in names or "embedding_4bit.dtype_out" in names  # a kernel outside the delegate
    top_level = sum(o["median_ms"] for o in p["operators"] if o["kind"] != "delegate op")
    assert 0 < top_level <= p["call_ms"] * 1.5  # inside one call (medians of parts need not add up exactly)
    assert all(o["calls"] >= 1 and o["share"] >= 0 for o in p["operators"])
    assert (dumps / "encoder_8da4w.etdp").stat().st_size > 0 and p["etdump"] == str(dumps / "encoder_8da4w.etdp")
    events = json.loads(trace.read_text())["traceEvents"]
    spans = [e for e in events if e["ph"] == "X"]
    assert spans and {e["args"]["call"] for e in spans} == set(range(5))
    assert len({e["pid"] for e in spans}) == len(profiles) - 1  # one process per profiled program
    assert all(e["dur"] >= 0 and e["ts"] >= 0 for e in spans)


def test_profile_prints_host_numbers_per_program(suite: Built) -> None:
    r = run_subprocess("profile", str(suite.bundle("arduino_q")), "--program", "mlp_fp32", "--runs", "2")
    assert r.code == 0, r.err[-2000:]
    assert "mlp_fp32 (xnnpack): forward" in r.out and "host numbers, not the device's" in r.out


def test_profile_of_an_unknown_program_is_an_error(suite: Built) -> None:
    r = run_subprocess("profile", str(suite.bundle("arduino_q")), "--program", "nope")
    assert r.code == 2 and "--program nope: no such program in the bundle" in r.err
