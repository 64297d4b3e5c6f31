"""The real part of an FFT written as matmuls with cosine and sine tables (deployc/graph/fourier.py): the
same values as torch.fft for one, two and three axes and each norm; FNet's token mixing exported through
deployc keeps no FFT and no complex tensor, with its sequence length still dynamic; an FFT whose
imaginary part is read, or which pads, stays as it is; an FFT mixer builds and verifies on the CPU."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from helpers.projects import build_project
from torch import nn

from deployc.graph.export import export_model
from deployc.graph.fourier import real_dft, real_ffts_as_matmuls
from deployc.plan.build_plan import DimPlan, InputPlan


@pytest.mark.parametrize("dims", [[1, 2], [2], [0, 1, 2], [1]])
@pytest.mark.parametrize("norm", [None, "backward", "ortho", "forward"])
def test_real_dft_equals_the_fft_s_real_part(dims: list[int], norm: str | None) -> None:
    x = torch.randn(2, 16, 24, generator=torch.Generator().manual_seed(0))
    expected = torch.fft.fftn(x, dim=dims, norm=norm).real
    got = real_dft(x, dims, norm)
    assert (got - expected).abs().max() <= 1e-6 * expected.abs().max()


def test_fnet_exports_without_an_fft_and_keeps_its_dynamic_length() -> None:
    from transformers import FNetConfig, FNetModel

    torch.manual_seed(0)
    config = FNetConfig(vocab_size=100, hidden_size=32, num_hidden_layers=2, intermediate_size=64,
                        max_position_embeddings=64, type_vocab_size=2)
    model = FNetModel(config).eval()
    ids = torch.randint(0, 100, (1, 16))
    inputs = [InputPlan(name="input_ids", shape=[1, "seq"], dtype="int64", range=(0, 99))]
    program = export_model(model, [ids], inputs, [DimPlan(name="seq", min=2, max=64)])
    ops = {str(n.target) for n in program.graph.nodes if n.op == "call_function"}
    assert not {op for op in ops if "fft" in op or "real" in op}
    assert all(not n.meta["val"].is_complex() for n in program.graph.nodes
               if isinstance(n.meta.get("val"), torch.Tensor))
    from executorch.exir import to_edge

    to_edge(program)  # edge ops only: no Python arithmetic on the dynamic length (the verifier refused it)
    for length in (2, 16, 37, 64):  # the tables follow the length at run time
        ids = torch.randint(0, 100, (1, length), generator=torch.Generator().manual_seed(length))
        with torch.no_grad():
            want = model(ids).last_hidden_state
            got = program.module()(ids).last_hidden_state
        assert (got - want).abs().max() <= 1e-5 * want.abs().max(), length


class _Fft(nn.Module):
    def __init__(self, transform: str) -> None:
        super().__init__()
        self.transform = transform

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.transform == "fft":
            return torch.fft.fft(x, dim=1).real
        if self.transform == "fft2":
            return torch.fft.fft2(x, norm="ortho").real
        return torch.fft.fftn(x, norm="forward").real


@pytest.mark.parametrize("transform", ["fft", "fft2", "fftn"])
def test_each_fft_form_whose_real_part_is_read_becomes_matmuls(transform: str) -> None:
    model, x = _Fft(transform), torch.randn(2, 6, 10, generator=torch.Generator().manual_seed(1))
    module = torch.export.export(model, (x,)).module()
    assert real_ffts_as_matmuls(module) == 1
    again = torch.export.export(module, (x,))
    assert not any("fft" in str(n.target) for n in again.graph.nodes)
    want = model(x)
    assert (again.module()(x) - want).abs().max() <= 1e-6 * want.abs().max()


class _Spectrum(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.fft.fftn(x, dim=(1, 2))
        return y.real + y.imag


class _Padded(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.fft.fftn(x, s=(8, 8), dim=(1, 2)).real


@pytest.mark.parametrize("model", [_Spectrum(), _Padded()])
def test_an_fft_read_whole_or_padded_is_left_as_it_is(model: nn.Module) -> None:
    module = torch.export.export(model, (torch.randn(1, 4, 6),)).module()
    assert real_ffts_as_matmuls(module) == 0
    assert any("fft" in str(n.target) for n in module.graph.nodes)


MIXER = """\
apiVersion: deployc/v1
name: mixer
version: 0.1.0
targets: [arduino_q]
models:
  mixer:
    source: {factory: "models.testnets:fourier_mixer"}
    inputs:
      x: {shape: [1, tokens, 32], range: [-1.0, 1.0]}
    dims:
      tokens: {min: 2, max: 24}
"""


@pytest.mark.full  # a build; the rewrite's values are held eagerly
@pytest.mark.slow
def test_an_fft_mixer_builds_for_the_cpu_with_a_dynamic_length_and_verifies(tmp_path: Path) -> None:
    """On XNNPACK, checked at the length's min, middle and max (the NPU's static case: tests/e2e/test_qnn.py)."""
    built = build_project(tmp_path, MIXER, "mixer.yaml")
    (unit,) = built.report["units"]
    assert unit["status"] == "built" and unit["verification"]["status"] == "passed", unit["verification"]
    assert unit["verification"]["metrics"]["min_sqnr_db"] > 60.0
