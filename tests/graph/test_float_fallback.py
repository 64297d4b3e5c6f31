"""A static scheme's float fallback (quantization.float_fallback, graph/sensitivity.py) and XNNPACK's rule
for written-out norms: the simulation agrees with what convert_pt2e makes, the fewest operators go float,
the budget holds, what is left float lowers, and a build that needs it verifies where plain int8 misses."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from helpers import testnets
from helpers.projects import build_project, make_project

from deployc.graph import sensitivity
from deployc.graph.metrics import compare
from deployc.graph.quantize import float_paths_only
from deployc.targets.backends import xnnpack


def _samples(seed: int, n: int) -> list[list[torch.Tensor]]:
    g = torch.Generator().manual_seed(seed)
    return [[torch.rand(1, 6, 8, generator=g) * 2 - 1] for _ in range(n)]


def _prepared(model: torch.nn.Module) -> Any:
    from executorch.backends.xnnpack.quantizer.xnnpack_quantizer import (
        XNNPACKQuantizer,
        get_symmetric_quantization_config,
    )
    from torchao.quantization.pt2e.quantize_pt2e import prepare_pt2e

    quantizer = (XNNPACKQuantizer().set_global(get_symmetric_quantization_config(is_per_channel=True))
                 .set_filter_function(xnnpack._off_the_residual_stream))
    ep = torch.export.export(model, tuple(_samples(0, 1)[0]))
    prepared = prepare_pt2e(ep.module(), float_paths_only(quantizer))
    for sample in _samples(1, 8):
        prepared(*sample)
    return prepared


def _worst_sqnr(model: torch.nn.Module, other: Any, samples: list[list[torch.Tensor]]) -> float:
    with torch.no_grad():
        return min(compare(model(*s).numpy(), other(*s).numpy()).sqnr_db for s in samples)


def _converted(prepared: Any, observers: set[str]) -> Any:
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e

    sensitivity.apply(prepared, observers)
    return convert_pt2e(prepared)


def test_the_simulation_is_what_convert_makes_and_the_fallback_meets_the_target() -> None:
    model, held_out = testnets.rms_norm_net(), _samples(2, 6)
    prepared = _prepared(model)
    choice = sensitivity.choose(prepared, held_out, sensitivity.Target(0.99, 20.0, budget=0.75))
    # The norm's statistics stay float by rule; its input's rows (1e-2 to 1e2) still cannot share a scale.
    assert choice.int8_sqnr_db < 10 and choice.quantized == 7
    assert choice.left_float == ["mul", "pow_1", "mul_1", "mul_2"] and choice.kept_sqnr_db >= 23
    int8 = _converted(_prepared(model), set())
    assert _worst_sqnr(model, int8, held_out) == pytest.approx(choice.int8_sqnr_db, abs=0.05)
    kept = _converted(prepared, choice.observers)
    assert _worst_sqnr(model, kept, held_out) == pytest.approx(choice.kept_sqnr_db, abs=0.05)
    assert _worst_sqnr(model, kept, _samples(3, 6)) > 20  # and on samples it never saw


class _TwoHeads(torch.nn.Module):
    """A residual block with two outputs: the ranking's downstream runs must return both, in order."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.mix, self.first, self.second = torch.nn.Linear(8, 8), torch.nn.Linear(8, 4), torch.nn.Linear(8, 3)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = x + torch.relu(self.mix(x)) * 3.0
        return self.first(h), self.second(h).softmax(-1)


@pytest.mark.parametrize("factory", [_TwoHeads, testnets.class_token, testnets.rms_norm_net])
def test_the_ranking_s_downstream_runs_give_the_whole_model_s_figures(factory: Any,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Each observer alone on, the model's worst SQNR over the samples: recomputed downstream of the observer
    from the float run's values, the same bits as running the whole model (and above the memory limit, the
    whole model is run)."""
    prepared, held_out = _prepared(factory()), _samples(2, 4)
    assert sensitivity._recorded_bytes(prepared) > 0  # export's shapes are on the prepared graph
    with sensitivity._switched(prepared) as switches:
        for s in switches.values():
            s.on = False
        with torch.no_grad():
            references = [sensitivity._flat(prepared(*sample)) for sample in held_out]
        assert len(references[0]) == (2 if factory is _TwoHeads else 1)
        whole = sensitivity._solo_sqnr_whole(prepared, switches, held_out, references)
        assert len(whole) >= 6 and min(whole.values()) < 60  # observers that cost something, to be told apart
        assert sensitivity._solo_sqnr(prepared, switches, held_out, references) == whole
        monkeypatch.setattr(sensitivity, "RECORD_LIMIT_BYTES", 0)
        assert sensitivity._solo_sqnr(prepared, switches, held_out, references) == whole


def test_nothing_goes_float_where_int8_meets_the_target_or_the_budget_is_too_small() -> None:
    model = testnets.rms_norm_net()
    generous = sensitivity.choose(_prepared(model), _samples(2, 6), sensitivity.Target(0.0, -20.0, budget=1.0))
    assert generous.left_float == [] and generous.observers == set()
    capped = sensitivity.choose(_prepared(model), _samples(2, 6), sensitivity.Target(0.99, 20.0, budget=0.1))
    assert capped.left_float == [] and capped.kept_sqnr_db == capped.int8_sqnr_db < 10
    # Three of seven meet the tolerance but not the margin above it: kept, since four are over the budget.
    short = sensitivity.choose(_prepared(model), _samples(2, 6), sensitivity.Target(0.99, 20.0, budget=0.5))
    assert len(short.left_float) == 3 and 20 <= short.kept_sqnr_db < 20 + sensitivity.MARGIN_DB


@pytest.mark.full  # a second fallback build
def test_a_weighted_operator_left_float_goes_float_whole_and_lowers() -> None:
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import to_edge_transform_and_lower

    model, held_out = testnets.class_token(), _samples(2, 6)
    prepared = _prepared(model)
    choice = sensitivity.choose(prepared, held_out, sensitivity.Target(0.99, 20.0, budget=1.0))
    assert choice.int8_sqnr_db < 10 and choice.kept_sqnr_db >= 23
    names = {n.name: n for n in prepared.graph.nodes}
    for name in choice.left_float:
        node = names[name]
        if str(node.target).startswith("aten.linear"):  # input and weight observers: off together
            observed = [str(a.target) for a in node.all_input_nodes if a.op == "call_module"]
            assert all(o in choice.observers for o in observed), name
    converted = _converted(prepared, choice.observers)
    ep = torch.export.export(converted, tuple(held_out[0]))
    program = to_edge_transform_and_lower(ep, partitioner=[XnnpackPartitioner()]).to_executorch()
    from executorch.runtime import Runtime

    method = Runtime.get().load_program(program.buffer).load_method("forward")
    assert compare(model(*held_out[0]).detach().numpy(), method.execute(held_out[0])[0].numpy()).sqnr_db > 20


def test_a_written_out_norm_s_statistics_stay_float() -> None:
    graph = torch.export.export(testnets.rms_norm_net(), tuple(_samples(0, 1)[0])).graph
    refused = sorted(str(n.target) for n in graph.nodes if n.op == "call_function"
                     and not xnnpack._off_the_residual_stream(n))
    assert refused == ["aten.add.Tensor", "aten.mean.dim", "aten.mul.Tensor"]  # mean(x**2) + eps, x * rsqrt
    assert xnnpack._norm_statistics(next(n for n in graph.nodes if str(n.target) == "aten.mean.dim"))


FALLBACK = """\
apiVersion: deployc/v1
name: fallback
version: 0.1.0
targets: [arduino_q]
models:
  normed:
    source: {factory: "models.testnets:rms_norm_net"}
    inputs:
      x: {shape: [1, 6, 8], range: [-1, 1]}
    quantization: {scheme: w8a8, float_fallback: 0.75}
    verify: {inputs: 1}  # the fallback's mechanism; on three inputs its program measures 30.5 / 18.3 / 33.0 dB
  normed_int8:
    source: {factory: "models.testnets:rms_norm_net"}
    inputs:
      x: {shape: [1, 6, 8], range: [-1, 1]}
    quantization: {scheme: w8a8, float_fallback: 0}
"""


def test_a_build_leaves_the_sensitive_operators_float_and_verifies(tmp_path: Path) -> None:
    built = build_project(tmp_path, FALLBACK, "fallback.yaml", must_pass=False)
    units = {u["model"]: u for u in built.report["units"]}
    normed, plain = units["normed"], units["normed_int8"]
    assert normed["status"] == "built" and normed["verification"]["status"] == "passed", normed["failure"]
    fallback = normed["float_fallback"]
    # 6 quantized operators: the norm's `1 + weight` is a constant (graph/constants.fold_parameter_chains)
    assert fallback["budget"] == 0.75 and fallback["quantized"] == 6 and fallback["int8_sqnr_db"] < 10
    assert 0 < len(fallback["left_float"]) <= 5 and fallback["kept_sqnr_db"] >= 20
    assert all(name.endswith(")") for name in fallback["left_float"])  # `module path (op)`
    assert normed["verification"]["metrics"]["min_sqnr_db"] > 20
    # Without it, the same model in plain int8 misses, as the fallback measured.
    assert plain["float_fallback"] is None and plain["verification"]["status"] == "failed"
    assert plain["verification"]["metrics"]["min_sqnr_db"] < 10
    assert built.result.code == 1


def test_the_plan_says_it_and_a_scheme_without_calibration_refuses_it(tmp_path: Path, cli: Any) -> None:
    manifest = make_project(tmp_path, FALLBACK, "fallback.yaml")
    r = cli("plan", str(manifest))
    assert r.code == 0, r.err
    assert "up to 75% of its operators float where int8 misses the tolerance" in r.out
    assert "float where int8" not in r.out.split("normed_int8")[1].split("\n\n")[0]
    manifest.write_text(FALLBACK.replace("{scheme: w8a8, float_fallback: 0}", "{scheme: 8da8w, float_fallback: 0.2}"))
    r = cli("validate", str(manifest))
    assert r.code != 0 and "Traceback" not in r.err + r.out
    text = manifest.read_text()
    line = text[:text.index("float_fallback: 0.2")].count("\n") + 1
    column = text.splitlines()[line - 1].index("0.2") + 1  # the error points at the value
    assert f"{manifest}:{line}:{column}: error: " in r.err
    assert "models.normed_int8.quantization.float_fallback: scheme '8da8w' is not static" in r.out + r.err


class _PaddedConvs(torch.nn.Module):
    """conv -> ReLU6 (hardtanh) -> zero pad -> conv: MobileNetV2's explicit "same" padding."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.first = torch.nn.Conv2d(3, 8, 1)
        self.second = torch.nn.Conv2d(8, 8, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.second(torch.nn.functional.pad(torch.nn.functional.hardtanh(self.first(x), 0.0, 6.0), [1, 1, 1, 1]))


def test_a_zero_pad_goes_float_only_with_its_input_and_the_program_lowers() -> None:
    """XNNPACK quantizes a zero pad of an int8 value by itself (InsertPadQDQPass): leaving only the pad's
    output float gave the next convolution an int8 input and float weights, refused at lowering ("Weight
    and Input should both be quantized"; MobileNetV2 in w8a8 with measured initial scales)."""
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import to_edge_transform_and_lower
    from torchao.quantization.pt2e.quantize_pt2e import prepare_pt2e

    from deployc.core.quantization import Recipe

    model = _PaddedConvs().eval()
    sample = [torch.rand(1, 3, 8, 8) * 2 - 1]
    quantizer = xnnpack.BACKEND.quantizer(Recipe(scheme="w8a8", method="pt2e"), {})
    prepared = prepare_pt2e(torch.export.export(model, tuple(sample)).module(), float_paths_only(quantizer))
    prepared(*sample)
    with sensitivity._switched(prepared) as switches:
        operators = sensitivity._inputs_observed(prepared, switches)
    [pad] = [n for n in prepared.graph.nodes if str(n.target).startswith("aten.pad.")]
    [after] = [str(u.target) for u in pad.users if u.op == "call_module"]
    off = sensitivity._closure(prepared, operators, {after})
    assert set(operators[pad.name]) <= off  # the pad's input (the relu's int8 output) goes float with it
    second = [n for n in prepared.graph.nodes if str(n.target).startswith("aten.conv")][-1]
    assert set(operators[second.name]) <= off  # and the convolution's weights with its input
    converted = _converted(prepared, off)
    ep = torch.export.export(converted, tuple(sample))
    program = to_edge_transform_and_lower(ep, partitioner=[XnnpackPartitioner()]).to_executorch()
    from executorch.runtime import Runtime

    method = Runtime.get().load_program(program.buffer).load_method("forward")
    assert compare(model(*sample).detach().numpy(), method.execute(sample)[0].numpy()).sqnr_db > 20
