"""The Snapdragon NPU (QNN) on this x86 host: the PyPI path (onnxruntime-qnn + deployc's compatibility
layer), every scheme lowered and verified through the HTP emulator for a conv net and an attention
block, build-time fallback, the runtime config's requirements, and refusals. The README's test command
installs the libraries (`deployc[qnn]`'s pin is in the test extra)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from helpers.projects import TESTS, Built, build_json, make_project
from helpers.suites import QNN_SCHEMES, QNN_SUITE

from deployc.core.errors import BuildError, ProfileError
from deployc.targets.backends.qnn import host as qnn_host

pytestmark = pytest.mark.slow

SCHEMES = QNN_SCHEMES


def _unit(npu: Built, model: str) -> dict:
    return next(u for u in npu.report["units"] if u["model"] == model)


@pytest.mark.parametrize("scheme", SCHEMES)
@pytest.mark.parametrize("model", ["conv", "attention"])
def test_every_scheme_is_lowered_whole_and_verified_on_the_emulator(npu: Built, model: str, scheme: str) -> None:
    u = _unit(npu, f"{model}_{scheme}")
    assert (u["unit"], u["backend"], u["quantization"], u["status"]) == ("npu", "qnn", scheme, "built")
    assert u["delegates"] == {"QnnBackend": 1} and u["delegated_share"] == 1.0 and u["non_delegated_ops"] == []
    v = u["verification"]
    assert v["status"] == "passed", v
    # Against eager fp32 through the x86 HTP emulator: fp16 is close, 16-bit activations closer than 8-bit.
    floor = {"fp16": 40.0, "16a8w": 25.0, "w8a8": 20.0, "16a4w": 12.0}[scheme]
    assert v["metrics"]["min_sqnr_db"] > floor and v["metrics"]["min_cosine"] > 0.98


def test_an_integer_mask_cast_to_float_runs_on_the_cpu_and_the_program_verifies(npu: Built) -> None:
    """The HTP's Cast of an integer into a quantized tensor lost the mask (DeBERTa: cosine 0 in w8a8)."""
    u = _unit(npu, "masked_w8a8")
    assert u["status"] == "built" and u["verification"]["status"] == "passed", u["verification"]
    assert u["verification"]["metrics"]["min_sqnr_db"] > 20.0
    assert u["non_delegated_ops"] == ["dim_order_ops._to_dim_order_copy.default"], u["non_delegated_ops"]


def test_a_batch_norm_after_a_linear_is_folded_and_the_16_bit_program_verifies(npu: Built) -> None:
    """The HTP computed LeViT's batch norm over a linear's rows wrongly with 16-bit activations (cosine 0)."""
    u = _unit(npu, "linear_bn_16a8w")
    assert u["status"] == "built" and u["verification"]["status"] == "passed", u["verification"]
    assert u["verification"]["metrics"]["min_sqnr_db"] > 25.0 and u["delegated_share"] == 1.0


def test_an_fft_s_real_part_lowers_to_the_npu_as_matmuls_and_verifies(npu: Built) -> None:
    """FNet's token mixing (the real part of a 2-D FFT): complex tensors stopped QNN's lowering."""
    u = _unit(npu, "fourier_fp16")
    assert u["status"] == "built" and u["verification"]["status"] == "passed", u["verification"]
    assert u["delegates"] == {"QnnBackend": 1} and u["delegated_share"] == 1.0 and u["non_delegated_ops"] == []
    assert u["verification"]["metrics"]["min_sqnr_db"] > 40.0


def test_a_16_bit_unfold_into_patches_keeps_its_values_on_the_emulator(npu: Built) -> None:
    """MobileViT v2's unfold: with its concatenation's 16-bit range narrower than its inputs', the HTP took
    the strided slices' values unrequantized and the output came out at half (7.1 dB; fake-quantized 49)."""
    u = _unit(npu, "unfold_16a8w")
    assert u["status"] == "built" and u["verification"]["status"] == "passed", u["verification"]
    assert u["delegated_share"] == 1.0 and u["verification"]["metrics"]["min_sqnr_db"] > 40.0


def test_a_16_bit_relu6_is_a_relu_and_a_minimum_and_keeps_its_precision(npu: Built) -> None:
    """The HTP's 16-bit ReluMinMax (ReLU6 lowered as is) lost precision: the same model with a functional
    torch.clamp(y, 0, 6), which stays one, measured 20.6 dB on the emulator; as a ReLU and a minimum, 49.9."""
    u = _unit(npu, "relu6_16a8w")
    assert u["status"] == "built" and u["verification"]["status"] == "passed", u["verification"]
    assert u["delegated_share"] == 1.0 and u["verification"]["metrics"]["min_sqnr_db"] > 40.0


def test_a_batch_norm_keeps_its_epsilon_on_the_npu(npu: Built) -> None:
    """QNN's BatchNorm builder took 1e-9 for every norm's epsilon: with running variances as small as the
    norms' 1e-3 (a trained network's), this fp16 net measured 13.6 dB on the emulator; 72.1 with the
    epsilon moved into the variance (MobileNetV2's seeded logits: 34.9 -> 47.0 dB)."""
    u = _unit(npu, "batch_norm_fp16")
    assert u["status"] == "built" and u["verification"]["status"] == "passed", u["verification"]
    assert u["delegated_share"] == 1.0 and u["verification"]["metrics"]["min_sqnr_db"] > 50.0


@pytest.mark.parametrize("scheme", ["16a8w", "w8a8"])
def test_a_batch_norm_no_convolution_takes_in_is_a_multiply_and_an_add(npu: Built, scheme: str) -> None:
    """The HTP's quantized BatchNorm computed a lone norm wrongly (this net: cosine 0.38 in 16a8w, 0.91 in
    w8a8 on the emulator); as x * scale + shift, with the constants quantized, 48 and 36 dB."""
    u = _unit(npu, f"lone_norm_{scheme}")
    assert u["status"] == "built" and u["verification"]["status"] == "passed", u["verification"]
    assert u["verification"]["metrics"]["min_sqnr_db"] > 30.0
    assert "aten.mul.Tensor" not in u["non_delegated_ops"]


def test_a_gather_of_one_constant_index_is_a_slice_on_the_npu(npu: Built) -> None:
    """Falcon's shared key and value cut out of its fused projection by a list index: the HTP's quantized
    Gather made this net's output unrelated to eager (cosine 0.005 in w8a8); as a slice, 36.7 dB."""
    u = _unit(npu, "gather_w8a8")
    assert u["status"] == "built" and u["verification"]["status"] == "passed", u["verification"]
    assert u["delegated_share"] == 1.0 and u["verification"]["metrics"]["min_sqnr_db"] > 30.0


def test_a_mask_made_in_the_graph_reaches_the_npu_as_a_constant(npu: Built) -> None:
    """DETR's encoder as transformers writes it: the all-ones pixel mask, resized and gathered by `arange`
    indices, failed the HTP's op validation in 16a8w ("Output[0] has incorrect Rank 4", then the sine
    table's float32 `arange` beside a 16-bit multiply); in w8a8 40% of the graph stayed on the CPU. The
    mask and the table are folded before quantization (graph/constants.fold_created_constants)."""
    u = _unit(npu, "pixel_mask_16a8w")
    assert u["status"] == "built" and u["verification"]["status"] == "passed", u["verification"]
    assert u["delegated_share"] == 1.0 and u["verification"]["metrics"]["min_sqnr_db"] > 40.0


def test_a_functional_clamp_is_a_relu_and_a_minimum_on_the_npu(npu: Built) -> None:
    """MobileNetV3's hard swish written with a functional, in-place ReLU6 and a hard sigmoid by a clamp: the
    HTP's 16-bit ReluMinMax took this net to 8.8 dB (cosine 0.977); as a ReLU and a minimum, 44.6 dB."""
    u = _unit(npu, "hard_swish_16a8w")
    assert u["status"] == "built" and u["verification"]["status"] == "passed", u["verification"]
    assert u["delegated_share"] == 1.0 and u["verification"]["metrics"]["min_sqnr_db"] > 40.0


def test_a_strided_nine_by_nine_convolution_is_computed_right_in_fp16(npu: Built) -> None:
    """MixNet's mixed kernels: the HTP's fp16 convolution of a 9 x 9 kernel at stride 2 put out noise from 32
    channels up (this net: 3.5 dB, its 3 x 3 half right; now 69.2); deployc hands QNN the 11 x 11 kernel with a ring
    of zeros, the same values."""
    u = _unit(npu, "mixed_kernels_fp16")
    assert u["status"] == "built" and u["verification"]["status"] == "passed", u["verification"]
    assert u["delegated_share"] == 1.0 and u["verification"]["metrics"]["min_sqnr_db"] > 60.0


def test_a_sigmoid_reading_a_convolution_is_computed_to_fp16_precision(npu: Built) -> None:
    """A squeeze-excite block: the HTP's fp16 sigmoid (and SiLU) after a convolution came to about 3.5e-3,
    this net 43.6 dB; written through a tanh, 65.0 dB."""
    u = _unit(npu, "squeeze_excite_fp16")
    assert u["status"] == "built" and u["verification"]["status"] == "passed", u["verification"]
    assert u["delegated_share"] == 1.0 and u["verification"]["metrics"]["min_sqnr_db"] > 60.0


# Runs a built program on the HTP emulator in a child process (a crash of the emulator ends only it) and
# prints the mean fitted gain of its output's channels on eager fp32's, minus one.
_CHANNEL_GAIN = """
import sys, torch
sys.path.insert(0, sys.argv[2])
import testnets
from deployc.targets.backends.qnn import host as qnn_host
qnn_host.activate()
from executorch.runtime import Runtime
model = getattr(testnets, sys.argv[3])()
x = torch.rand(1, 120, 14, 14, generator=torch.Generator().manual_seed(7)) * 2 - 1
got = Runtime.get().load_program(sys.argv[1]).load_method("forward").execute([x])[0][0].flatten(1).double()
with torch.no_grad():
    ref = model(x)[0].flatten(1).double()
print("GAIN", float(((ref * got).sum(1) / (ref * ref).sum(1) - 1).mean()))
"""


def test_a_product_with_a_sigmoid_keeps_its_scale_in_fp16(npu: Built) -> None:
    """A swish multiplied as x * (tanh(x/2)/2 + 1/2) came out about 0.011% too large on the HTP (the mean
    fitted gain of this net's 720 channels; eager fp16 on the CPU: 0.000%), and MixNet's deeper stages
    amplified it (30.8 dB); written as x/2 + x/2 * tanh(x/2), about 0.0001%, MixNet 54.9 dB."""
    u = _unit(npu, "conv_norm_swish_fp16")
    assert u["status"] == "built" and u["verification"]["status"] == "passed", u["verification"]
    proc = subprocess.run([sys.executable, "-c", _CHANNEL_GAIN, str(npu.folder / u["pte"]),
                           str(TESTS / "helpers"), "conv_norm_swish"],
                          capture_output=True, text=True, timeout=600)
    gain = next((line.split()[1] for line in proc.stdout.splitlines() if line.startswith("GAIN ")), None)
    assert gain is not None, proc.stderr[-2000:]
    assert abs(float(gain)) < 2e-5


def test_one_key_value_head_shared_by_every_query_head_lowers_and_verifies(npu: Built) -> None:
    """Multi-query attention (Falcon's): QNN's SDPA decomposition took a head mismatch only as GQA."""
    u = _unit(npu, "multi_query_w8a8")
    assert u["status"] == "built" and u["verification"]["status"] == "passed", u["verification"]
    assert u["verification"]["metrics"]["min_sqnr_db"] > 20.0


def test_the_runtime_config_says_what_the_phone_needs(npu: Built) -> None:
    config = json.loads((npu.out / "npu" / "1.0.0" / "snapdragon" / "runtime.json").read_text())
    program = next(p for p in config["programs"] if p["name"] == "conv_16a8w")
    assert program["backend"] == "qnn" and program["methods"][0]["delegates"] == ["QnnBackend"]
    assert {r["name"]: r["value"] for r in program["requirements"]} == {
        "soc_model": "SM8650", "htp_arch": "75", "qnn_runtime_min": "2.51.0",
        "qnn_libraries": "libQnnHtp.so libQnnSystem.so libQnnHtpV75Stub.so libQnnHtpV75Skel.so"}
    gpu = next(p for p in config["programs"] if p["name"] == "causal_mqa")
    assert "requirements" not in gpu


def test_pytorch_s_own_transformer_layer_lowers_and_verifies_in_fp16(npu: Built) -> None:
    """nn.MultiheadAttention's packed q/k/v projection failed the HTP's graph prepare; each gets its slice."""
    u = _unit(npu, "torch_layer")
    assert (u["unit"], u["backend"], u["status"], u["fell_back_from"]) == ("npu", "qnn", "built", [])
    assert u["verification"]["status"] == "passed" and u["delegates"] == {"QnnBackend": 1}
    assert u["verification"]["metrics"]["min_sqnr_db"] > 50.0


def test_a_unit_whose_backend_cannot_lower_falls_back_to_the_next(npu: Built) -> None:
    u = _unit(npu, "causal_mqa")
    assert (u["unit"], u["backend"], u["status"]) == ("gpu", "vulkan", "built")
    (fell,) = u["fell_back_from"]
    assert (fell["unit"], fell["backend"], fell["step"]) == ("npu", "qnn", "lower")
    assert fell["error"].startswith("lowering for qnn failed:")
    assert "Failed to generate Qnn context binary" in fell["error"]


@pytest.mark.full  # a further NPU build
def test_fallback_error_fails_the_unit_instead(tmp_path: Path) -> None:
    manifest = make_project(tmp_path / "project", QNN_SUITE.split("  conv_fp16:")[0] + """\
  causal_mqa:
    source: {factory: "models.testnets:multi_query"}
    inputs:
      x: {shape: [1, 16, 32], range: [-1.0, 1.0]}
    quantization: fp16
""", "strict.yaml")
    profile = tmp_path / "project" / "targets" / "snapdragon.yaml"
    profile.write_text(profile.read_text().replace("fallback: next", "fallback: error"))
    result, report = build_json(manifest, tmp_path / "dist", tmp_path / "cache")
    assert result.code == 1 and "Traceback" not in result.err
    (u,) = report["units"]
    assert (u["unit"], u["status"], u["failure"]["step"], u["fell_back_from"]) == ("npu", "failed", "lower", [])


def test_plan_names_the_qnn_toolchain_or_why_there_is_none(project: Path, cli, monkeypatch) -> None:
    (project / "m.yaml").write_text(QNN_SUITE.split("  attention_fp16:")[0])
    r = cli("plan", "m.yaml")
    assert r.code == 0, r.err
    assert "toolchain qnn: onnxruntime-qnn 2.7.0 (PyPI) (qnn 2.51.0, compat_layer " in r.out
    assert "conv_fp16 │ snapdragon │ npu" in r.out
    monkeypatch.setattr(qnn_host, "find", lambda env: "no QNN host libraries: pip install 'deployc[qnn]'")
    r = cli("plan", "m.yaml")
    assert r.code == 0, r.err
    assert "toolchain qnn: not usable here: no QNN host libraries: pip install 'deployc[qnn]'" in r.out
    assert ("conv_fp16 on snapdragon: skipped npu (qnn): toolchain not usable here: no QNN host libraries" in r.out)


def test_an_unknown_soc_or_a_wrong_htp_arch_is_a_located_profile_error(project: Path) -> None:
    from deployc.targets.profile import load_profile, search_path

    profile = project / "targets" / "phone.yaml"
    text = (project / "targets" / "snapdragon.yaml").read_text().replace("name: snapdragon", "name: phone")
    profile.write_text(text.replace("soc_model: SM8650, htp_arch: 75", "soc_model: SM9999, htp_arch: 75"))
    with pytest.raises(ProfileError) as info:
        load_profile("phone", project, search_path(project, {}))
    d = info.value.diagnostics[0]
    assert d.message == "units[0].options.soc_model: unknown Qualcomm SoC 'SM9999'" and "SM8650" in (d.hint or "")
    assert d.location.path == str(profile.resolve()) and d.location.line > 1
    profile.write_text(text.replace("htp_arch: 75", "htp_arch: 73"))
    with pytest.raises(ProfileError) as info:
        load_profile("phone", project, search_path(project, {}))
    assert info.value.diagnostics[0].message == "units[0].options.htp_arch: SM8650 has HTP v75, not v73"


def test_a_release_of_the_wheel_the_layer_was_not_made_for_is_refused(monkeypatch) -> None:
    monkeypatch.setattr(qnn_host, "LAYERED_RELEASES", {"9.9.9": "2.99.0"})
    reason = qnn_host.find({})
    assert isinstance(reason, str)
    assert reason.startswith("onnxruntime-qnn 2.7.0 ships QNN libraries deployc's compatibility layer was not made "
                             "for (onnxruntime-qnn==9.9.9 (QNN 2.99.0)); install that release: pip install 'deployc[qnn]'")
    with pytest.raises(BuildError, match=r"QNN: onnxruntime-qnn 2\.7\.0 ships QNN libraries"):
        qnn_host.environment({})


def test_the_layer_itself_refuses_a_library_of_another_version(tmp_path: Path, monkeypatch) -> None:
    """Built for QNN 2.99, in front of the 2.51 library: it must refuse, not hand out a table."""
    libs = qnn_host.find({})
    assert not isinstance(libs, str)
    monkeypatch.setenv("DEPLOYC_CACHE_DIR", str(tmp_path / "cache"))
    wrong = libs.__class__(libs.source, libs.origin, libs.lib_dir, "2.99.0", libs.layer)
    root = qnn_host.ensure_layer(wrong)
    code = ("import ctypes, sys; lib = ctypes.CDLL(sys.argv[1]);"
            "f = lib.QnnInterface_getProviders; f.restype = ctypes.c_uint64;"
            "p = ctypes.c_void_p(); n = ctypes.c_uint32(0);"
            "print(f(ctypes.byref(p), ctypes.byref(n)), n.value)")
    proc = subprocess.run([sys.executable, "-c", code, str(root / qnn_host.HOST_LIB_DIR / "libQnnHtp.so")],
                          capture_output=True, text=True, timeout=120)
    # The QNN library prints a note of its own on stdout: the answer is the last line.
    assert proc.stdout.splitlines()[-1].split() == ["1008", "0"], proc.stderr  # QNN_COMMON_ERROR_INCOMPATIBLE_BINARIES
    assert "deployc QNN compatibility layer: the library's build id is v2.51.0" in proc.stderr
    assert "it was made for QNN v2.99. libraries" in proc.stderr and "refusing" in proc.stderr
    right = qnn_host.ensure_layer(libs)
    proc = subprocess.run([sys.executable, "-c", code, str(right / qnn_host.HOST_LIB_DIR / "libQnnHtp.so")],
                          capture_output=True, text=True, timeout=120)
    assert proc.stdout.splitlines()[-1].split() == ["0", "1"], proc.stderr


def test_an_sdk_is_used_as_it_is(tmp_path: Path) -> None:
    sdk = tmp_path / "qairt" / "2.37.0.250724"
    (sdk / "lib" / "x86_64-linux-clang").mkdir(parents=True)
    assert isinstance(qnn_host.find({"QNN_SDK_ROOT": str(sdk)}), qnn_host.QnnLibraries)  # the wheel, then
    (sdk / "lib" / "x86_64-linux-clang" / "libQnnHtp.so").write_bytes(b"")
    libs = qnn_host.find({"QNN_SDK_ROOT": str(sdk)})
    assert isinstance(libs, qnn_host.QnnLibraries)
    assert (libs.source, libs.version, libs.layer) == ("sdk", "2.37.0", None)
    assert libs.facts() == {"qnn": "2.37.0", "libraries": "QNN SDK"}
    assert qnn_host.environment({"QNN_SDK_ROOT": str(sdk)})["QNN_SDK_ROOT"] == str(sdk)


def test_a_dynamic_model_pinned_to_the_npu_is_a_located_error(project: Path, cli) -> None:
    (project / "m.yaml").write_text(
        "apiVersion: deployc/v1\nname: d\nversion: 1.0.0\ntargets: [snapdragon]\nmodels:\n"
        "  m:\n    source: {factory: 'models.small:mlp'}\n    inputs: {x: {shape: [batch, 64]}}\n"
        "    dims: {batch: {min: 1, max: 8}}\n    quantization: fp16\n"
        "    overrides:\n      snapdragon: {unit: npu}\n")
    r = cli("plan", "m.yaml")
    assert r.code == 2
    assert r.err.startswith("m.yaml:12:26: error: models.m.overrides.snapdragon.unit: unit 'npu' (qnn) cannot build "
                            "this model: needs static shapes; the model declares dynamic dims batch")


def test_a_rebuild_goes_straight_to_the_fallback(npu: Built) -> None:
    """The npu's lowering failure is cached with its key: nothing is lowered again, nothing imports torch."""
    code = ("import sys; from deployc.cli.app import main;"
            f"rc = main(['build', 'npu.yaml', '--out', {str(npu.out)!r}, '--cache-dir', {str(npu.cache)!r}, '--json']);"
            "print('TORCH', 'torch' in sys.modules, file=sys.stderr); sys.exit(rc)")
    proc = subprocess.run([sys.executable, "-c", code], cwd=npu.folder, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "TORCH False" in proc.stderr and "building" not in proc.stderr
    u = next(u for u in json.loads(proc.stdout)["units"] if u["model"] == "causal_mqa")
    assert (u["unit"], u["status"]) == ("gpu", "cached")
    assert [f["unit"] for f in u["fell_back_from"]] == ["npu"]


FNET = """\
apiVersion: deployc/v1
name: mixer
version: 0.1.0
targets: [snapdragon]
models:
  fnet:
    task: embedding
    source: {huggingface: hf/fnet}
    quantization: fp16
    overrides:
      snapdragon: {dims: {seq: {min: 16, max: 16}}PIN}
"""


def test_an_architecture_the_npu_does_not_take_is_planned_on_the_next_unit_with_the_op_named(
        project: Path, cli, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    """Known before lowering (qnn/refusals.py): plan reads config.json's model_type, nothing is imported."""
    from deployc.targets.backends import base

    # No architecture is refused by every ExecuTorch backend today (FNet's FFT was, until graph/fourier.py):
    # one listed there is refused on every unit, the planner's message located.
    monkeypatch.setitem(base.EXECUTORCH_REFUSED, "fnet", "aten.fft_fftn, the Fourier transform FNet mixes "
                        "its tokens with, is not in ExecuTorch's Core ATen opset")
    for model_type in ("fnet", "rt_detr"):
        folder = project / "hf" / model_type
        folder.mkdir(parents=True)
        (folder / "config.json").write_text(json.dumps({"model_type": model_type, "vocab_size": 50,
                                                        "hidden_size": 16, "max_position_embeddings": 32}))
        (folder / "model.safetensors").write_bytes(b"")  # plan never reads the weights
    # RT-DETR is refused in the NPU's int8 schemes only; the GPU takes no w8a8, so the CPU builds it.
    (project / "m.yaml").write_text(FNET.replace("PIN", "").replace("hf/fnet", "hf/rt_detr")
                                    .replace("quantization: fp16", "quantization: w8a8"))
    r = cli("plan", "m.yaml")
    assert r.code == 0, r.err
    assert "fnet on snapdragon: skipped npu (qnn): cannot build rt_detr in w8a8: QNN's op validation refuses a " \
        "rank-6 select_copy" in r.out
    assert re.search(r"fnet\s+│ snapdragon │ cpu\s+│ xnnpack", r.out), r.out
    (project / "m.yaml").write_text(FNET.replace("PIN", ""))
    r = cli("plan", "m.yaml")
    # A model_type every ExecuTorch backend refuses (base.EXECUTORCH_REFUSED): every unit says why, located.
    assert r.code == 2 and "Traceback" not in r.err
    assert "m.yaml:9:19: error: models.fnet.quantization: no unit of target 'snapdragon' can build model 'fnet'" in r.err
    assert "npu (qnn): cannot build fnet in fp16: aten.fft_fftn" in r.err
    assert "gpu (vulkan): cannot build fnet in fp16: aten.fft_fftn, the Fourier transform FNet mixes its tokens " \
           "with, is not in ExecuTorch's Core ATen opset" in r.err
    (project / "m.yaml").write_text(FNET.replace("PIN", ", unit: npu"))
    r = cli("plan", "m.yaml")
    assert r.code == 2 and "Traceback" not in r.err
    assert "m.yaml:11" in r.err and "leave the unit out" in r.err and "models.fnet.overrides.snapdragon.unit: unit 'npu' (qnn) cannot build this " \
        "model: cannot build fnet in fp16: aten.fft_fftn" in r.err


def test_rt_detr_is_refused_in_the_schemes_it_was_measured_in() -> None:
    from deployc.targets.backends import BACKENDS

    qnn = BACKENDS["qnn"]
    assert "has incorrect Rank 6" in (qnn.refusal("rt_detr", "w8a8") or "")
    assert "'Tile'" in (qnn.refusal("rt_detr", "16a8w") or "")
    assert qnn.refusal("rt_detr", "fp16") is None  # fp16 lowers
    # DETR and Conditional DETR lower in every scheme since their masks are folded before quantization
    # (graph/constants.fold_created_constants)
    assert all(qnn.refusal(model_type, scheme) is None for model_type in ("detr", "conditional_detr")
               for scheme in ("fp16", "16a8w", "w8a8"))
    # WavLM lowers in every scheme since its position buckets are constants (graph/position_buckets.py)
    assert all(qnn.refusal("wavlm", scheme) is None for scheme in ("fp16", "16a8w", "w8a8"))
    # FNet lowers everywhere (graph/fourier.py); Falcon too since its one pass builds no KV cache and its
    # list-index gathers are slices (hf_model.load_directory, qnn.constant_gathers_as_slices)
    assert all(qnn.refusal(model_type, scheme) is None for model_type in ("fnet", "falcon")
               for scheme in ("fp16", "16a8w", "w8a8"))


def test_a_key_value_head_shared_by_every_query_head_is_marked_as_gqa_with_the_same_values() -> None:
    from helpers.testnets import multi_query

    from deployc.targets.backends.qnn.graph_rewrites import shared_heads_as_gqa

    model, x = multi_query(), torch.rand(1, 16, 32, generator=torch.Generator().manual_seed(0)) * 2 - 1
    program = torch.export.export(model, (x,))
    assert shared_heads_as_gqa(program.graph_module) == 1
    assert shared_heads_as_gqa(program.graph_module) == 0  # marked once
    (sdpa,) = [n for n in program.graph.nodes if n.target is torch.ops.aten.scaled_dot_product_attention.default]
    assert sdpa.kwargs["enable_gqa"] is True
    with torch.no_grad():
        assert (program.module()(x) - model(x)).abs().max() < 1e-6


def test_an_attention_of_constants_alone_is_folded_and_one_of_the_input_is_kept() -> None:
    # DETR's first decoder self-attention reads learned queries alone: left in the graph, the HTP failed
    # to prepare the layer norm after it in fp16 ("could not create op: q::layernorm_2d_fp16_...")
    from helpers.testnets import learned_queries

    from deployc.targets.backends.qnn.graph_rewrites import fold_constants

    model, x = learned_queries(), torch.rand(1, 6, 8, generator=torch.Generator().manual_seed(0)) * 2 - 1
    program = fold_constants(torch.export.export(model, (x,)))
    sdpa = torch.ops.aten.scaled_dot_product_attention.default
    targets = [n.target for n in program.graph.nodes if n.op == "call_function"]
    assert targets.count(sdpa) == 1  # the cross-attention to the input, with its own op back
    assert not any("layer_norm" in str(t) or "qkv" in str(t) for t in targets)
    assert all(isinstance(t, torch._ops.OpOverload) or "getitem" in str(t) for t in targets)
    with torch.no_grad():
        assert (program.module()(x) - model(x)).abs().max() < 1e-6


class _TinyScores(torch.nn.Module):
    """Attention scores spanning +-0.01, as a tiny random model's (LeViT's) are."""

    def forward(self, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        return (q @ k.transpose(-2, -1) * 0.01).softmax(dim=-1)


@pytest.mark.parametrize("scheme", ["w8a8", "16a8w"])
def test_a_softmax_input_is_quantized_at_a_step_of_at_least_2_to_the_minus_16(scheme: str) -> None:
    """The HTP's 16-bit softmax went wrong at LeViT's step of 7e-7 (12 dB where the simulation had 74)."""
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    from deployc.core.quantization import Recipe
    from deployc.targets.backends.qnn import BACKEND
    from deployc.targets.backends.qnn.quantizer import SOFTMAX_MIN_SCALE

    gen = torch.Generator().manual_seed(0)
    x = (torch.rand(1, 8, 4, generator=gen) - 0.5, torch.rand(1, 8, 4, generator=gen) - 0.5)
    model = _TinyScores()
    quantizer = BACKEND.quantizer(Recipe(scheme=scheme, method="pt2e"), {})
    prepared = prepare_pt2e(torch.export.export(model, x).module(), quantizer)
    prepared(*x)
    converted = convert_pt2e(prepared)
    softmax = next(n for n in converted.graph.nodes if "softmax" in str(n.target))
    dequantize = softmax.args[0]
    assert "dequantize" in str(dequantize.target)
    scores = x[0] @ x[1].transpose(-2, -1) * 0.01
    if scheme == "16a8w":  # MinMax alone would have chosen a step below the floor
        assert float(scores.max() - scores.min()) / 65535 < SOFTMAX_MIN_SCALE / 10
    assert dequantize.args[1] >= SOFTMAX_MIN_SCALE
    torch.testing.assert_close(converted(*x), model(*x), atol=1e-3, rtol=0)


class _ScoresAndSdpa(torch.nn.Module):
    """A linear's output (a 16-bit activation), attention by hand and through SDPA (aten._safe_softmax)."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(4, 4)

    def forward(self, q: torch.Tensor, k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = self.proj(q)
        by_hand = (h @ k.transpose(-2, -1)).softmax(dim=-1) @ k
        return by_hand, torch.nn.functional.scaled_dot_product_attention(h, k, k)


@pytest.mark.parametrize("widen", [True, False])
def test_a_16_bit_activation_has_twice_its_calibrated_range_and_a_softmax_input_its_own(widen: bool) -> None:
    """16-bit ranges from zero doubled (the MinMax ranges of 16 calibration samples clipped BEiT's, Swin V2's,
    PVT v2's tails on the NPU); a softmax's input keeps its range, SDPA's softmax included. A recipe that does
    not widen (a decoder calibrated on text) keeps every calibrated range."""
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    from deployc.core.quantization import Recipe
    from deployc.targets.backends.qnn import BACKEND
    from deployc.targets.backends.qnn.quantizer import ACTIVATION_HEADROOM_16BIT

    torch.manual_seed(0)
    x = (torch.rand(1, 6, 4) + 0.5, torch.rand(1, 6, 4) - 0.5)
    model = _ScoresAndSdpa().eval()
    prepared = prepare_pt2e(torch.export.export(model, x).module(),
                            BACKEND.quantizer(Recipe(scheme="16a8w", method="pt2e", widen_ranges=widen), {}))
    prepared(*x)
    softmaxes = [n for n in prepared.graph.nodes if "softmax" in str(n.target)]
    assert {str(n.target) for n in softmaxes} == {"aten.softmax.int", "aten._safe_softmax.default"}
    for softmax in softmaxes:  # the observer the softmax reads keeps the calibrated range
        observer = getattr(prepared, softmax.args[0].target)
        assert type(observer).__name__ == "MinMaxObserver"
    converted = convert_pt2e(prepared)
    linear = next(n for n in converted.graph.nodes if str(n.target) == "aten.linear.default")
    quantize = next(iter(linear.users))
    h = model.proj(x[0]).detach()
    span = float(h.max().clamp(min=0) - h.min().clamp(max=0))
    factor = ACTIVATION_HEADROOM_16BIT if widen else 1.0
    assert quantize.args[1] == pytest.approx(factor * span / 65535, rel=1e-4)
    for got, want in zip(converted(*x), model(*x)):
        torch.testing.assert_close(got, want, atol=2e-3, rtol=0)


def test_16bit_headroom_stays_finite_at_float32s_lowest() -> None:
    """GPT-Neo masks scores with float32's lowest value: doubled, that range was -inf and the HTP refused the
    infinite scale at graph prepare. Such a range keeps what MinMax alone gives."""
    from torchao.quantization.pt2e import MinMaxObserver

    from deployc.targets.backends.qnn.quantizer import headroom_observer

    kwargs = {"dtype": torch.int32, "quant_min": 0, "quant_max": 65535, "qscheme": torch.per_tensor_affine}
    headroom, plain = headroom_observer(MinMaxObserver)(**kwargs), MinMaxObserver(**kwargs)
    lowest = torch.tensor([torch.finfo(torch.float32).min, 0.5])
    headroom(lowest), plain(lowest)
    scale, _ = headroom.calculate_qparams()
    assert torch.isfinite(scale).all() and scale.item() == pytest.approx(plain.calculate_qparams()[0].item())
    ordinary = headroom_observer(MinMaxObserver)(**kwargs)
    ordinary(torch.tensor([-1.0, 3.0]))
    assert ordinary.calculate_qparams()[0].item() == pytest.approx(2 * 4.0 / 65535)


def test_a_16_bit_concatenation_is_quantized_at_its_inputs_scale() -> None:
    """QNN's concatenation observer gives its inputs its own range so the HTP need not requantize them; the
    16-bit headroom goes on both, or the concatenation's scale was half its inputs' (MobileViT v2's unfold)."""
    from helpers.testnets import patch_unfold

    from deployc.core.quantization import Recipe
    from deployc.graph.export import export_model
    from deployc.graph.quantize import pt2e_quantize
    from deployc.targets.backends.qnn import BACKEND

    g = torch.Generator().manual_seed(0)
    samples = [[torch.rand(1, 32, 8, 8, generator=g) * 2 - 1] for _ in range(4)]
    ep, _, _ = pt2e_quantize(export_model(patch_unfold(), samples[0], [], [], by_name=False),
                             BACKEND.quantizer(Recipe(scheme="16a8w", method="pt2e"), {}), samples,
                             lambda m: export_model(m, samples[0], [], [], by_name=False))
    cat = next(n for n in ep.graph.nodes if str(n.target) == "aten.cat.default")
    scale = next(iter(cat.users)).args[1]  # the quantize of its output
    assert [a.args[1] for a in cat.args[0]] == [scale] * 4  # each input's dequantize
