"""`deployc profile`: per-operator and per-delegate-call times of a bundle's programs from ExecuTorch's
ETDump on this host, a Chrome trace, the ETDump files kept; programs that cannot run here say why."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from helpers.projects import Built, run_subprocess


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


ETRECORD = """\
apiVersion: deployc/v1
name: recorded
version: 1.0.0
targets: [arduino_q]
models:
  encoder:
    source: {factory: "models.small:text_encoder", kwargs: {vocab: 200, dim: 32, heads: 2}}
    inputs:
      tokens: {shape: [1, seq], dtype: int64, range: [0, 199]}
    dims:
      seq: {min: 4, max: 16}
"""


@pytest.mark.full  # lowers a program again with its ETRecord
def test_etrecord_pairs_with_the_etdump(tmp_path: Path) -> None:
    """--etrecord lowers a cached program again with its record on, keeps the record only beside identical
    program bytes, caches it; profile reads the pair the way Model Explorer's overlay does."""
    import zipfile

    from helpers.projects import build_json, make_project

    manifest = make_project(tmp_path / "project", ETRECORD, "recorded.yaml")
    out, cache, records = tmp_path / "dist", tmp_path / "cache", tmp_path / "etrecords"
    r, _ = build_json(manifest, out, cache, "--no-emulate")
    assert r.code == 0, r.err[-2000:]
    bundle = out / "recorded" / "1.0.0" / "arduino_q"
    before = {p.name: p.read_bytes() for p in bundle.iterdir() if p.is_file()}
    r, report = build_json(manifest, out, cache, "--no-emulate", "--etrecord", str(records))
    assert r.code == 0, r.err[-2000:]
    [e] = report["etrecords"]
    record = records / "arduino_q" / "encoder.etrecord"
    assert (e["target"], e["program"], e["path"], e["cached"]) == ("arduino_q", "encoder", str(record), False)
    assert {"debug_handle_map", "delegate_map", "edge_dialect_exported_program/forward"} <= set(
        zipfile.ZipFile(record).namelist())
    about = json.loads((records / "arduino_q" / "encoder.etrecord.json").read_text())
    config = json.loads((bundle / "runtime.json").read_text())
    assert about["program_sha256"] == config["programs"][0]["sha256"]
    # The bundle is the same bytes with or without a record asked for.
    assert {p.name: p.read_bytes() for p in bundle.iterdir() if p.is_file()} == before
    r, report = build_json(manifest, out, cache, "--no-emulate", "--etrecord", str(records))
    assert r.code == 0 and report["etrecords"][0]["cached"] is True

    dumps = tmp_path / "etdump"
    r = run_subprocess("profile", str(bundle), "--runs", "3", "--etdump-dir", str(dumps), "--etrecord-dir",
                       str(records / "arduino_q"), "--json")
    assert r.code == 0, r.err[-2000:]
    [p] = json.loads(r.out)["profiles"]
    assert p["etrecord"] == str(record) and " events map onto the ETRecord's graph" in p["etrecord_note"]
    mapped, total = (int(n) for n in p["etrecord_note"].split(" events")[0].split(" of "))
    assert 0 < mapped <= total
    # The embedding lookup runs outside XNNPACK: the ETRecord names the module it ran for.
    lookup = next(o for o in p["operators"] if o["name"].startswith("embedding"))
    assert lookup["kind"] == "operator" and lookup["source"] == ["embed"]

    # A record of other program bytes is refused by name, not used.
    from deployc.runtime.profiler import _etrecord

    about["program_sha256"] = "0" * 64
    (records / "arduino_q" / "encoder.etrecord.json").write_text(json.dumps(about))
    why = _etrecord(records / "arduino_q", config["programs"][0])
    assert isinstance(why, str) and "was recorded for another program (sha256 000000000000" in why


@pytest.mark.full  # the profile again, natively
def test_the_native_runner_profiles_the_same_operators(suite: Built, runner: Path, tmp_path: Path) -> None:
    """deployc-runner --etdump: the C++ runtime's ETDump, read by the same summary as the Python runtime's."""
    bundle = suite.bundle("arduino_q")
    native, python = (json.loads(run_subprocess("profile", str(bundle), "--program", "encoder_8da4w", "--runs", "3",
                                                *extra, "--json").out)["profiles"][0]
                      for extra in (["--runner", str(runner)], []))
    assert native["status"] == "profiled" and "through deployc-runner (C++)" in native["ran_on"]
    assert native["call_ms"] > 0 and native["runs"] == 3
    # The same program, the same operators: the same delegate calls and kernels, whichever runtime ran it.
    assert {(o["name"], o["kind"], o["calls"]) for o in native["operators"] if o["kind"] != "delegate op"} == {
        (o["name"], o["kind"], o["calls"]) for o in python["operators"] if o["kind"] != "delegate op"}
    dump = tmp_path / "native.etdp"
    r = subprocess.run([str(runner), str(bundle), "--program", "mlp_fp32", "--input", str(_npy(tmp_path)),
                        "--repeat", "4", "--etdump", str(dump)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]
    from deployc.runtime.profiler import summarize_etdump

    # The runner's own declared warm-up calls come first in its ETDump, then the four calls asked for.
    warmup = {p["name"]: p["warmup"] for p in json.loads((bundle / "runtime.json").read_text())["programs"]}
    operators, trace, call_ms = summarize_etdump(dump.read_bytes(), "xnnpack", None, warmups=warmup["mlp_fp32"] + 1)
    assert call_ms > 0 and {e.call for e in trace} == {0, 1, 2}
    assert [o.kind for o in operators if o.kind == "delegate"] == ["delegate"]
    r = subprocess.run([str(runner), str(bundle), "--self-test", "--etdump", str(dump)], capture_output=True, text=True)
    assert r.returncode == 2 and "--etdump records one program's calls" in r.stderr


def _npy(folder: Path) -> Path:
    import numpy as np

    path = folder / "x.npy"
    np.save(path, np.linspace(-1, 1, 32, dtype=np.float32).reshape(2, 16))
    return path


def test_an_npu_program_is_profiled_on_the_emulator(npu: Built) -> None:
    r = run_subprocess("profile", str(npu.out / "npu" / "1.0.0" / "snapdragon"), "--program", "conv_fp16",
                       "--runs", "2", "--json")
    assert r.code == 0, r.err[-2000:]
    [p] = json.loads(r.out)["profiles"]
    assert p["status"] == "profiled" and p["backend"] == "qnn" and "HTP emulator" in p["ran_on"]
    delegate = [o for o in p["operators"] if o["kind"] == "delegate"]
    assert len(delegate) == 1 and delegate[0]["name"].startswith("qnn delegate (instruction ")
    assert 0.5 <= delegate[0]["share"] <= 1.0  # the whole program is one QNN call
