"""Parameter chains folded into the tensors they amount to (graph/constants.py): the packed q/k/v of
nn.MultiheadAttention, Gemma's `1 + weight`, BiT's standardised weights, and a quantize that convert_pt2e leaves on a constant, which XNNPACK could not take,
and a float64 path static int8 leaves alone; each built in w8a8 and verified against eager."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import torch
import torch.ao.quantization.fx._decomposed  # registers the quantized_decomposed ops
from helpers import testnets
from helpers.projects import build_project

from deployc.core.graph_edits import attribute
from deployc.graph import constants


def test_a_packed_projection_s_slices_become_parameters_and_the_packed_ones_go() -> None:
    model, x = testnets.attention_pool(), torch.rand(1, 6, 8)
    module = torch.export.export(model, (x,)).module()
    assert sum("split" in str(n.target) for n in module.graph.nodes) == 2  # in_proj weight and bias
    # kv's weight and bias, and the probe's query: the probe and q's weight are constants, so is their product
    assert constants.fold_parameter_chains(module) == 3
    assert not any("split" in str(n.target) or "getitem" in str(n.target) for n in module.graph.nodes)
    names = {n for n, _ in module.named_parameters()} | {n for n, _ in module.named_buffers()}
    assert not {"attention.in_proj_weight", "attention.in_proj_bias", "probe"} & names
    assert sum(str(n.target) == "aten.linear.default" for n in module.graph.nodes) == 4  # embed, kv, out, head
    assert torch.equal(module(x), model(x))
    assert constants.fold_parameter_chains(module) == 0


def test_a_folded_view_is_stored_row_major_even_where_an_axis_has_size_one() -> None:
    # with need_weights the probe's scaled query, folded, is a (heads, 1, dim) transpose of a (1, heads, dim)
    # tensor: `.contiguous()` keeps its strides (4, 8, 1), ExecuTorch read them as dim order [1, 0, 2] and
    # XNNPACK failed at run time ("Propagating input shapes failed": SigLIP vision in w8a8)
    model, x = testnets.attention_pool(need_weights=True), torch.rand(1, 6, 8)
    module = torch.export.export(model, (x,)).module()
    assert constants.fold_parameter_chains(module) == 3
    query = next(n for n in module.graph.nodes if str(n.target) == "aten.bmm.default").args[0]
    assert query.op == "get_attr"
    folded = attribute(module, query.target)
    assert folded.shape == (2, 1, 4) and folded.stride() == (4, 4, 1)
    assert torch.equal(module(x), model(x))


class _GemmaNorm(torch.nn.Module):
    """Gemma's RMS norm: the weight stored as an offset from 1, cast and added in the graph; beside it, a
    parameter broadcast against another into a larger tensor."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(8) * 0.1)
        self.rows, self.columns = torch.nn.Parameter(torch.randn(6, 1)), torch.nn.Parameter(torch.randn(1, 8))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        normed = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)
        return normed * (1.0 + self.weight.float()) + (self.rows + self.columns)


def test_a_norm_s_one_plus_weight_is_folded_and_a_broadcast_that_grows_is_not() -> None:
    torch.manual_seed(0)
    model, x = _GemmaNorm().eval(), torch.rand(1, 6, 8)
    module = torch.export.export(model, (x,)).module()
    assert constants.fold_parameter_chains(module) == 1
    adds = [n for n in module.graph.nodes if str(n.target) == "aten.add.Tensor"]
    assert len(adds) == 3  # the norm's eps, the output's sum, and the broadcast rows + columns
    assert all(a.args[0].op != "get_attr" or a.args[1] != 1.0 for a in adds)
    assert "weight" not in {n for n, _ in module.named_parameters()}
    torch.testing.assert_close(module(x), model(x), rtol=0, atol=0)


class _StandardisedConv(torch.nn.Conv2d):
    """BiT's convolution: its weight standardised in the forward, by a batch norm without running stats."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        weight = torch.nn.functional.batch_norm(self.weight.reshape(1, self.out_channels, -1), None, None,
                                                training=True, momentum=0.0, eps=1e-8).reshape_as(self.weight)
        return torch.nn.functional.conv2d(x, weight, self.bias, padding=1)


def test_a_weight_standardised_in_the_forward_becomes_a_constant() -> None:
    torch.manual_seed(0)
    model, x = _StandardisedConv(3, 4, 3).eval(), torch.rand(1, 3, 8, 8)
    module = torch.export.export(model, (x,)).module()
    assert constants.fold_parameter_chains(module) == 1
    assert [str(n.target) for n in module.graph.nodes if n.op == "call_function"
            and "assert" not in str(n.target) and "guards" not in str(n.target)] == ["aten.conv2d.default"]
    torch.testing.assert_close(module(x), model(x), rtol=0, atol=0)


class _WrittenSlice(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.table = torch.nn.Parameter(torch.randn(4, 8))
        self.linear = torch.nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        table = self.table.clone()
        table[0] = x[0, 0]  # a write through a slice of the parameter's copy
        return self.linear(x) + table.sum(0)


def test_a_graph_that_writes_in_place_keeps_its_slices() -> None:
    torch.manual_seed(0)
    model, x = _WrittenSlice().eval(), torch.rand(1, 6, 8)
    module = torch.export.export(model, (x,)).module()
    assert any(str(n.target) == "aten.copy_.default" for n in module.graph.nodes)
    assert constants.fold_parameter_chains(module) == 0  # folding the slice would lose the write
    assert torch.equal(module(x), model(x))


class _Quantizes(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("fixed", torch.tensor(0.7))
        self.register_buffer("updated", torch.tensor([1.0, -2.0]))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        ops = torch.ops.quantized_decomposed
        out = x + self.fixed
        for constant in (self.fixed, self.updated):
            q = ops.quantize_per_tensor.default(constant, 0.02, 0, -128, 127, torch.int8)
            out = out + ops.dequantize_per_tensor.default(q, 0.02, 0, -128, 127, torch.int8)
        self.updated.add_(1.0)  # a buffer the model updates: its quantize must read it each call
        return out


def test_a_constant_s_quantize_is_folded_unless_the_graph_writes_the_constant() -> None:
    x = torch.rand(2)
    module = torch.export.export(_Quantizes(), (x,)).module()
    reference = copy.deepcopy(module)
    assert constants.fold_constant_quantizes(module) == 1
    quantizes = [n for n in module.graph.nodes if str(n.target) == "quantized_decomposed.quantize_per_tensor.default"]
    assert [q.args[0].target for q in quantizes] == ["updated"]
    folded = next(b for n, b in module.named_buffers() if n.startswith("_deployc_folded"))
    assert folded.dtype == torch.int8 and folded.item() == 35  # 0.7 / 0.02
    for _ in range(2):  # the update is seen on the second call too
        assert torch.equal(module(x), reference(x))


MANIFEST = """\
apiVersion: deployc/v1
name: folded
version: 0.1.0
targets: [arduino_q]
models:
  pooled:
    source: {factory: "models.testnets:attention_pool"}
    inputs:
      x: {shape: [1, 6, 8], range: [-1, 1]}
    quantization: {scheme: w8a8}
  weighed:
    source: {factory: "models.testnets:attention_pool", kwargs: {need_weights: true}}
    inputs:
      x: {shape: [1, 6, 8], range: [-1, 1]}
    quantization: {scheme: w8a8}
  wide:
    source: {factory: "models.testnets:float64_branch"}
    inputs:
      x: {shape: [1, 6, 8], range: [-1, 1]}
    quantization: {scheme: w8a8}
"""


@pytest.mark.full  # a static int8 build
def test_attention_pooling_and_a_float64_branch_build_in_static_int8_and_verify(tmp_path: Path) -> None:
    # Before: "Missing out variants: dequantize_per_channel" (the pooling head's linears left outside
    # XNNPACK, then the MCU unit failed too), "Propagating input shapes failed" (the folded query's strides,
    # "weighed") and "Expecting input to have dtype torch.float32" (the float64 concatenation observed).
    built = build_project(tmp_path, MANIFEST, "folded.yaml")
    units = {u["model"]: u for u in built.report["units"]}
    for name in ("pooled", "weighed", "wide"):
        unit = units[name]
        assert unit["status"] == "built" and unit["verification"]["status"] == "passed", unit["failure"]
        assert unit["verification"]["metrics"]["min_sqnr_db"] > 20
    assert units["pooled"]["non_delegated_ops"] == [] or all(
        "linear" not in op and "addmm" not in op for op in units["pooled"]["non_delegated_ops"])
    # the float64 arithmetic runs outside the delegate, in float64, as in eager
    assert {"aten.cat.default", "aten.sin.default"} <= set(units["wide"]["non_delegated_ops"])


def test_a_mask_and_a_position_table_made_from_ones_and_arange_are_folded_where_they_stop_shrinking() -> None:
    """DETR's encoder as transformers writes it (testnets.pixel_mask_attention): the all-ones pixel mask
    resized to the feature map, gathered into the attention mask by `arange` indices, and a sine table of
    its running sum. Folded before quantization; the mask's broadcast to 64 x 64 grows and stays."""
    model, x = testnets.pixel_mask_attention(), torch.rand(1, 3, 32, 32) * 2 - 1
    module = torch.export.export(model, (x,)).module()
    made = {"aten.ones.default", "aten.arange.default", "aten.arange.start", "aten.index.Tensor",
            "aten.upsample_nearest2d.vec", "aten.cumsum.default", "aten.sin.default"}
    assert made <= {str(n.target) for n in module.graph.nodes}
    assert constants.fold_created_constants(module) == 2  # the 64-key mask and the 64 x 16 position table
    targets = [str(n.target) for n in module.graph.nodes if n.op == "call_function"]
    assert not made & set(targets) and "aten.expand.default" in targets
    folded = {tuple(b.shape): b for n, b in module.named_buffers() if n.startswith("_deployc_folded")}
    assert set(folded) == {(1, 1, 1, 64), (1, 64, 16)} and folded[(1, 1, 1, 64)].dtype == torch.bool
    assert torch.equal(module(x), model(x))
    assert constants.fold_created_constants(module) == 0
    assert constants.fold_parameter_chains(module) == 0  # nothing of its parameters alone was folded here


def test_a_tensor_made_from_the_input_s_size_is_not_folded() -> None:
    """Under a dynamic dim, `arange(seq)` reads a symbolic size: it is made anew for each input."""

    class Positions(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x + torch.arange(x.shape[1])

    x = torch.rand(1, 6)
    module = torch.export.export(Positions(), (x,), dynamic_shapes=({1: torch.export.Dim("seq", min=2, max=16)},)).module()
    assert constants.fold_created_constants(module) == 0
    assert torch.equal(module(torch.rand(1, 9) * 0), torch.arange(9).float()[None])


def test_a_created_tensor_larger_than_the_cap_stays_a_recipe(monkeypatch: pytest.MonkeyPatch) -> None:
    """A folded tensor is stored in the program: a long context's causal mask (2048 x 2048 floats, 16 MiB)
    is computed by the program instead."""

    class Causal(torch.nn.Module):
        def forward(self, scores: torch.Tensor) -> torch.Tensor:
            size = scores.shape[-1]
            return scores + torch.full((size, size), float("-inf")).triu(1)

    x = torch.rand(1, 8, 8)
    module = torch.export.export(Causal(), (x,)).module()
    monkeypatch.setattr(constants, "CREATED_MAX_ELEMENTS", 63)
    assert constants.fold_created_constants(module) == 0
    monkeypatch.setattr(constants, "CREATED_MAX_ELEMENTS", 64)
    assert constants.fold_created_constants(module) == 1
    assert torch.equal(module(x), x + torch.full((8, 8), float("-inf")).triu(1))


def test_a_graph_thousands_of_nodes_deep_is_folded_without_recursing_node_by_node() -> None:
    """IGCV3's w8a8 failed at quantization with "maximum recursion depth exceeded": which nodes are
    constants was followed input by input, one Python frame per node of a 979-node chain."""

    class Deep(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.bias = torch.nn.Parameter(torch.ones(4))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            for _ in range(1500):
                x = torch.relu(x)
            return x + self.bias * 2 + torch.arange(4)

    x = torch.rand(4) - 0.5
    module = torch.export.export(Deep(), (x,)).module()
    assert constants.fold_parameter_chains(module) == 1  # bias * 2
    assert constants.fold_created_constants(module) == 1  # the arange
    assert torch.equal(module(x), torch.relu(x) + 2 + torch.arange(4))
