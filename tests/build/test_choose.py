"""`quantization: auto` and `quantization: {choose: [...], by: size|latency}`: the plan lists every
candidate a unit accepts (and why others are passed over), the build verifies them in order and keeps
the first that meets every tolerance (by size) or the fastest that does (by latency), the report shows
every candidate, and a rebuild builds nothing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers.projects import CHOOSE, Built, build_json, build_project, run_subprocess


def test_by_size_keeps_the_first_candidate_that_passes(chosen: Built) -> None:
    u = chosen.unit("small", "arduino_q")
    assert u["status"] == "built" and u["quantization"] == "8da8w"
    assert u["choice"] == {"by": "size", "auto": False, "passed_over": []}
    by_scheme = {c["scheme"]: c for c in u["candidates"]}
    assert [c["scheme"] for c in u["candidates"]] == ["8da4w", "8da8w", "fp32"]  # fewest weight bits first
    four, eight, fp32 = by_scheme["8da4w"], by_scheme["8da8w"], by_scheme["fp32"]
    assert four["status"] == "failed" and four["step"] == "verify" and four["metrics"]["min_cosine"] < 0.999
    assert eight["status"] == "passed" and eight["chosen"] and eight["metrics"]["min_cosine"] >= 0.999
    assert fp32 == {"scheme": "fp32", "program_key": fp32["program_key"], "status": "not-tried", "chosen": False}
    assert 0 < four["size_bytes"] < eight["size_bytes"] == u["size_bytes"]
    assert u["program_key"] == eight["program_key"]
    # The bundle ships the chosen program, and its runtime config says which scheme it is.
    runtime = json.loads((chosen.bundle("arduino_q") / "runtime.json").read_text())
    program = next(p for p in runtime["programs"] if p["name"] == "small")
    assert program["quantization"] == "8da8w" and program["chosen_by"] == "size"
    assert [(c["scheme"], c["status"]) for c in program["candidates"]] == [
        ("8da4w", "failed"), ("8da8w", "chosen"), ("fp32", "not-tried")]
    assert program["candidates"][0]["size_bytes"] == four["size_bytes"]
    assert program["candidates"][0]["min_cosine"] == round(four["metrics"]["min_cosine"], 4)


def test_by_latency_verifies_every_candidate_and_keeps_the_fastest_passing(chosen: Built) -> None:
    u = chosen.unit("fast", "arduino_q")
    assert u["status"] == "built" and u["choice"]["by"] == "latency"
    tried = u["candidates"]
    assert {c["status"] for c in tried} == {"passed"}  # both verified, none left untried
    fastest = min(tried, key=lambda c: c["latency_ms"])
    assert [c["chosen"] for c in tried] == [c is fastest for c in tried]
    assert u["quantization"] == fastest["scheme"] and u["latency_ms"] == fastest["latency_ms"]


def test_the_table_shows_every_candidate(chosen: Built, tmp_path: Path) -> None:
    r = run_subprocess("build", str(chosen.manifest), "--out", str(tmp_path / "out"), "--cache-dir",
                       str(chosen.cache), "--no-emulate", cwd=chosen.manifest.parent)
    assert r.code == 0, r.err[-2000:]
    rows = [line for line in (r.out + r.err).splitlines() if "│ small" in line]
    assert "choose by size: 8da8w" in rows[0]
    assert [next(s for s in ("8da4w", "8da8w", "fp32") if f" {s} " in row) for row in rows[1:4]] == [
        "8da4w", "8da8w", "fp32"]
    assert "failed" in rows[1] and "chosen" in rows[2] and "not-tried" in rows[3]


def test_a_rebuild_builds_no_candidate_again(chosen: Built, tmp_path: Path) -> None:
    result, report = build_json(chosen.manifest, tmp_path / "out", chosen.cache, "--no-emulate")
    assert result.code == 0, result.err[-2000:]
    assert {u["status"] for u in report["units"]} == {"cached"}
    assert chosen.unit("small", "arduino_q")["candidates"] == next(
        u for u in report["units"] if u["model"] == "small")["candidates"]
    assert "building" not in result.err


def test_no_candidate_passing_fails_the_unit_naming_each(chosen: Built, tmp_path: Path) -> None:
    # The same 8da4w program (tolerances are not part of a program's key): judged again, not rebuilt.
    text = CHOOSE.split("  fast:")[0].replace("choose: [8da4w, 8da8w, fp32]", "choose: [8da4w]").replace(
        "min_cosine: 0.999", "min_cosine: 0.9999")
    manifest = chosen.manifest.with_name("strict.yaml")
    manifest.write_text(text)
    page = tmp_path / "report.html"
    result, report = build_json(manifest, tmp_path / "out", chosen.cache, "--no-emulate", "--report", str(page))
    assert result.code == 1 and "building" not in result.err
    # The HTML report of a failed build says why there is no bundle, and what failed.
    assert "no bundle: 1 unit(s) failed: small" in page.read_text()
    assert "at choose: small on arduino_q/cpu: no candidate scheme met every tolerance" in page.read_text()
    u = next(u for u in report["units"] if u["model"] == "small")
    assert u["status"] == "failed" and u["failure"]["step"] == "choose"
    assert "no candidate scheme met every tolerance: 8da4w: verification against eager PyTorch missed: cosine" in (
        u["failure"]["error"])


def test_plan_lists_candidates_in_order_and_the_schemes_passed_over(project: Path, cli) -> None:
    (project / "m.yaml").write_text("""\
apiVersion: deployc/v1
name: auto
version: 0.1.0
targets: [snapdragon]
models:
  mlp:
    source: {factory: models.small:mlp}
    inputs:
      x: {shape: [1, 64], dtype: float32}
    quantization: auto
  conv:
    source: {factory: models.small:convnet}
    inputs:
      image: {shape: [1, 3, 32, 32], dtype: float32}
    quantization: {choose: [fp16, 16a8w, 8da4w], by: size}
  batched:
    source: {factory: models.small:mlp}
    inputs:
      x: {shape: [batch, 64], dtype: float32}
    dims: {batch: {min: 1, max: 4}}
    quantization: auto
""")
    r = cli("plan", "m.yaml", "--json")
    assert r.code == 0, r.err
    plan = json.loads(r.out)["plan"]
    units = {u["model"]: u for u in plan["targets"][0]["units"]}
    mlp, conv = units["mlp"], units["conv"]
    # auto: every scheme the NPU accepts, fewest weight bits first (the profile's order among equals)
    assert [mlp["quantization"], *(c["quantization"] for c in mlp["candidates"])] == ["16a4w", "16a8w", "w8a8", "fp16"]
    assert mlp["choice"]["auto"] and mlp["choice"]["schemes"] == ["16a4w", "16a8w", "w8a8", "fp16"]
    assert len({mlp["program_key"], *(c["program_key"] for c in mlp["candidates"])}) == 4
    assert [conv["quantization"], *(c["quantization"] for c in conv["candidates"])] == ["16a8w", "fp16"]
    assert conv["choice"]["passed_over"] == [{"scheme": "8da4w", "reason": "accepts 16a8w, 16a4w, w8a8, fp16; "
                                                                         "not 8da4w"}]
    cpu = next(f for f in conv["fallbacks"] if f["unit"] == "cpu")  # falling back, the CPU's own candidates
    assert cpu["quantization"] == "8da4w" and cpu["candidates"] == []
    # The NPU takes no dynamic dims in any scheme (said once); the GPU's programs cannot run here, so no
    # scheme can be chosen by measurement on it.
    batched = units["batched"]
    assert batched["unit"] == "cpu" and batched["quantization"] == "8da4w"
    assert [s["reason"] for s in batched["skipped"]] == [
        "no candidate scheme (16a8w, 16a4w, w8a8, fp16): needs static shapes; the model declares dynamic dims batch "
        "(make them static for this target: overrides.snapdragon.dims.<dim>: {min: N, max: N})",
        "cannot choose a scheme by measurement: its programs do not run on this host (Vulkan programs need a GPU "
        "with the Vulkan delegate; this host's runtime has none)"]
    r = cli("plan", "m.yaml")
    assert "auto by size" in r.out
    assert "conv on snapdragon/npu: candidates by size, the first that meets every tolerance: 16a8w [new], fp16 [new]" in r.out
    assert "conv on snapdragon/npu: passed over 8da4w: the unit does not take them" in r.out


@pytest.mark.parametrize(("quantization", "message"), [
    ("{choose: [fp32, 8da8w], by: speed}", "models.m.quantization.by: 'speed' is not one of: size, latency"),
    ("{scheme: fp32, choose: [8da8w]}", "give either `scheme` (one scheme) or `choose`"),
    ("{choose: [fp32, fp32]}", "`choose` names a scheme twice"),
    ("{choose: []}", "models.m.quantization.choose"),
    ("{scheme: fp32, by: size}", "`by` applies to `choose`"),
    ("{choose: [fp32, 8da8w], group_size: 32}", "models.m.quantization.group_size: none of fp32, 8da8w is grouped"),
    ("{choose: [fp32, 8da8w], calibration: {samples: 4}}", "none of fp32, 8da8w takes calibration"),
])
def test_a_bad_choice_is_a_located_error(project: Path, cli, quantization: str, message: str) -> None:
    (project / "m.yaml").write_text(f"""\
apiVersion: deployc/v1
name: bad
version: 0.1.0
targets: [arduino_q]
models:
  m:
    source: {{factory: models.small:mlp}}
    inputs:
      x: {{shape: [1, 64], dtype: float32}}
    quantization: {quantization}
""")
    r = cli("validate", "m.yaml")
    assert r.code == 2
    assert "m.yaml:10:" in r.err and message in r.err, r.err
    assert "Traceback" not in r.err


def test_a_choice_no_unit_can_take_is_a_located_plan_error(project: Path, cli) -> None:
    (project / "m.yaml").write_text("""\
apiVersion: deployc/v1
name: bad
version: 0.1.0
targets: [arduino_q]
models:
  m:
    source: {factory: models.small:mlp}
    inputs:
      x: {shape: [1, 64], dtype: float32}
    quantization: {choose: [16a8w, fp16]}
    overrides:
      arduino_q: {unit: cpu}
""")
    r = cli("plan", "m.yaml")
    assert r.code == 2
    assert "m.yaml:12:" in r.err and "unit 'cpu' (xnnpack) cannot build this model: no candidate scheme: " in r.err
    assert "16a8w: accepts fp32, 8da8w, 8da4w, w8a8; not 16a8w" in r.err


@pytest.mark.full  # NPU candidates then CPU ones
def test_no_candidate_passing_on_the_npu_falls_back_to_the_cpus_candidates(tmp_path: Path) -> None:
    """fallback: next applies to a choice too: the NPU's 16a4w misses 0.9999, the CPU's 8da8w meets it."""
    text = """\
apiVersion: deployc/v1
name: suite
version: 1.0.0
targets: [snapdragon]
models:
  small:
    source: {factory: models.small:mlp, kwargs: {features: 64, hidden: 256, classes: 16}}
    inputs:
      x: {shape: [1, 64], dtype: float32, range: [-2.0, 2.0]}
    quantization: {choose: [16a4w, 8da8w]}
    verify: {min_cosine: 0.9999}
"""
    built = build_project(tmp_path, text, "suite.yaml", "--no-emulate")
    u = built.unit("small", "snapdragon")
    assert (u["status"], u["unit"], u["quantization"]) == ("built", "cpu", "8da8w")
    (fell,) = u["fell_back_from"]
    assert (fell["unit"], fell["backend"], fell["step"]) == ("npu", "qnn", "choose")
    assert fell["error"].startswith("no candidate met every tolerance (16a4w: verification against eager PyTorch "
                                    "missed: cosine")
    assert [(c["scheme"], c["status"], c["chosen"]) for c in u["candidates"]] == [("8da8w", "passed", True)]
    assert "small@snapdragon/npu:16a4w: qnn failed at choose; falling back to unit cpu (xnnpack)" in built.result.err
