"""What deployc changes in a model before export, held to eager without lowering anything: weight norm
baked into plain weights (deployc/graph/model.py), nn.MultiheadAttention's packed projection split for QNN
(deployc/targets/backends/qnn/), a GroupNorm of one group as a LayerNorm, a ReLU6 as a ReLU and a
minimum, a strided 9 x 9 convolution widened to 11 x 11 and sigmoids written through tanh (fp16 only), a batch norm's epsilon moved into
its variance, a lone batch norm as a multiply and an add and a
gather of constant consecutive indices as a slice for QNN (the same module), and embedding tables the model reads as tensors kept float when the others are
quantized, Falcon's own linear as a plain one and a linear on a rank-4 input on its rows
(deployc/graph/quantize.py)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from deployc.graph.model import _bake_parametrizations, _head_norms_on_rows  # noqa: E402
from deployc.graph.quantize import looked_up_embeddings, quantize_embeddings  # noqa: E402
from deployc.targets.backends.qnn.graph_rewrites import (  # noqa: E402
    batch_norms_as_affine,
    clamps_as_relu_minimum,
    constant_gathers_as_slices,
    sigmoids_as_tanh,
)
from deployc.targets.backends.qnn.model_rewrites import (  # noqa: E402
    batch_norm_eps_in_variance,
    one_group_as_layer_norm,
    relu6_as_minimum,
    separate_in_projections,
    strided_nine_by_nine_convs_widened,
)


def test_weight_norm_is_baked_to_the_weight_eager_computes() -> None:
    torch.manual_seed(0)
    conv = torch.nn.utils.parametrizations.weight_norm(torch.nn.Conv1d(4, 4, 3, groups=2), dim=2)
    model = torch.nn.Sequential(conv, torch.nn.GELU()).eval()
    x = torch.randn(1, 4, 20)
    before = model(x)
    _bake_parametrizations(model)
    assert not torch.nn.utils.parametrize.is_parametrized(conv)
    assert isinstance(conv.weight, torch.nn.Parameter) and "weight" in dict(conv.named_parameters())
    assert torch.equal(model(x), before)
    graph = torch.export.export(model, (x,), strict=False).graph  # the weight is an input, not computed
    assert not {str(n.target) for n in graph.nodes if n.op == "call_function"} & {
        "aten._weight_norm_interface.default", "aten.norm.ScalarOpt_dim", "aten.linalg_vector_norm.default"}


def test_per_head_rms_norms_run_on_rows() -> None:
    """transformers' Gemma 3 q/k norms (RMSNorm over each head of a 4-D tensor) run on a 2-D view: the same
    numbers in eager, and the exported graph normalises a 2-D tensor (what QNN's HTP computes right in fp16)."""
    from transformers.models.gemma3.modeling_gemma3 import Gemma3RMSNorm

    class Heads(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.q_norm, self.out_norm = Gemma3RMSNorm(8), Gemma3RMSNorm(32)
            torch.nn.init.normal_(self.q_norm.weight)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            q = self.q_norm(x.view(1, 5, 4, 8))
            return self.out_norm(q.reshape(1, 5, 32))  # a 3-D call stays as it is

    torch.manual_seed(0)
    model, x = Heads().eval(), torch.randn(1, 5, 32) * 3
    before = model(x)
    _head_norms_on_rows(model)
    assert torch.equal(model(x), before)
    graph = torch.export.export(model, (x,), strict=False).graph
    ranks = [len(n.meta["val"].shape) for n in graph.nodes if n.op == "call_function"
             and str(n.target) == "aten.pow.Tensor_Scalar"]
    assert ranks == [2, 3]  # the per-head norm on rows, the hidden-size norm unchanged


@pytest.mark.parametrize("need_weights", [True, False])
def test_multihead_attention_projects_q_k_and_v_with_separate_slices(need_weights: bool) -> None:
    """nn.MultiheadAttention's packed in-projection (unflattened to (3, dim), that axis moved first: the
    HTP failed to prepare it in fp16) becomes three projections by slices of it: the same outputs, for
    self-attention and for a learned probe attending over the tokens (SigLIP's pooling head)."""
    torch.manual_seed(0)
    attention = torch.nn.MultiheadAttention(32, 4, batch_first=True).eval()
    probe, x = torch.randn(1, 1, 32), torch.randn(1, 7, 32)
    packed = attention.in_proj_weight.detach().clone()
    with torch.no_grad():
        before = [attention(q, x, x, need_weights=need_weights)[0] for q in (x, probe)]
        separate_in_projections(attention)
        after = [attention(q, x, x, need_weights=need_weights)[0] for q in (x, probe)]
    assert attention.in_proj_weight is None and not attention._qkv_same_embed_dim
    assert torch.equal(torch.cat([attention.q_proj_weight, attention.k_proj_weight, attention.v_proj_weight]), packed)
    for b, a in zip(before, after):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-6)
    graph = torch.export.export(attention, (x, x, x), strict=False).graph
    assert not any("unflatten" in str(n.target) for n in graph.nodes)


def test_only_qnn_splits_the_packed_projection() -> None:
    """Elsewhere the packed form stays: on XNNPACK the split left the packed bias stored twice."""
    from deployc.core.quantization import Recipe
    from deployc.targets.backends import BACKENDS

    packed = {}
    for name in ("qnn", "xnnpack", "vulkan"):
        attention = torch.nn.MultiheadAttention(32, 4)
        BACKENDS[name].adapt_model(torch.nn.Sequential(attention), Recipe(scheme="fp16", method="none"))
        packed[name] = attention.in_proj_weight is not None
    assert packed == {"qnn": False, "xnnpack": True, "vulkan": True}


class Queries(torch.nn.Module):
    """DETR's shape: token embeddings looked up, learned queries read as a tensor."""

    def __init__(self) -> None:
        super().__init__()
        self.tokens = torch.nn.Embedding(10, 8)
        self.queries = torch.nn.Embedding(4, 8)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.tokens(ids).sum(1, keepdim=True) + self.queries.weight.unsqueeze(0)


def test_tables_read_as_tensors_stay_float_and_the_model_still_exports() -> None:
    from deployc.targets.backends.base import embedding_weights

    torch.manual_seed(0)
    model = Queries().eval()
    ids = torch.tensor([[1, 2, 3]])
    assert looked_up_embeddings(model, [ids]) == {id(model.tokens)}
    skipped = quantize_embeddings(model, embedding_weights(8, None), None,
                                  looked_up_embeddings(model, [ids]))
    assert skipped == ["queries"]
    assert type(model.queries.weight.data) is torch.Tensor and type(model.tokens.weight.data) is not torch.Tensor
    torch.export.export(model, (ids,), strict=False)


def test_a_buffer_the_call_writes_is_put_back() -> None:
    class Cache(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.table = torch.nn.Embedding(5, 2)
            self.register_buffer("cache", torch.zeros(3, 2))

        def forward(self, ids: torch.Tensor) -> torch.Tensor:
            self.cache.index_copy_(0, torch.tensor([0]), self.table(ids)[0])
            return self.cache

    model = Cache()
    looked_up_embeddings(model, [torch.tensor([[4]])])
    assert torch.equal(model.cache, torch.zeros(3, 2))


class RawWeight(torch.nn.Module):
    """WavLM's shape: one linear called as a module, another's weight handed on as a tensor (transposed)."""

    def __init__(self) -> None:
        super().__init__()
        self.called, self.raw = torch.nn.Linear(16, 16), torch.nn.Linear(16, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.called(x) + x @ self.raw.weight.t()


def test_linears_read_as_tensors_stay_float_and_the_model_still_runs() -> None:
    from deployc.graph.quantize import input_ranks, torchao_quantize
    from deployc.targets.backends.base import int8_dynamic_activations

    torch.manual_seed(0)
    model, x = RawWeight().eval(), torch.randn(2, 16)
    called = input_ranks(model, [x], torch.nn.Linear)
    assert called == {id(model.called): 2}
    torchao_quantize(model, int8_dynamic_activations(8, None), None, called)
    assert type(model.raw.weight.data) is torch.Tensor and type(model.called.weight.data) is not torch.Tensor
    with torch.no_grad():
        model(x)  # quantized, the raw weight's transpose would raise ("IntxUnpackedToInt8Tensor ... aten.t")


def test_falcons_own_linear_becomes_a_plain_linear_and_quantizes() -> None:
    """FalconLinear computes `input @ weight.T + bias` on the raw weight: as a plain Linear it gives the same
    values and its weight quantizes (8da8w failed at quantize before: "... aten.permute")."""
    from transformers.models.falcon.modeling_falcon import FalconLinear

    from deployc.graph.quantize import input_ranks, plain_linears, torchao_quantize
    from deployc.targets.backends.base import int8_dynamic_activations

    def falcon_mlp() -> torch.nn.Module:
        torch.manual_seed(0)
        return torch.nn.Sequential(FalconLinear(16, 32), torch.nn.GELU(), FalconLinear(32, 8, bias=False)).eval()

    model, x = falcon_mlp(), torch.randn(2, 5, 16)
    with torch.no_grad():
        before = model(x)
        assert plain_linears(model) == 2 and all(type(m) is torch.nn.Linear for m in (model[0], model[2]))
        torch.testing.assert_close(model(x), before, rtol=1e-5, atol=1e-6)  # addmm vs matmul + add
        model = falcon_mlp()  # torchao_quantize makes them plain itself
        torchao_quantize(model, int8_dynamic_activations(8, None), None, input_ranks(model, [x], torch.nn.Linear))
        assert type(model[0].weight.data) is not torch.Tensor and type(model[2].weight.data) is not torch.Tensor
        assert torch.nn.functional.cosine_similarity(model(x).flatten(), before.flatten(), dim=0) > 0.999


def test_a_linear_on_a_four_dim_input_runs_on_its_rows_and_quantizes_with_the_same_values() -> None:
    """FocalNet projects (batch, height, width, channels); XNNPACK's dynamically quantized linear takes rank 2
    or 3 ("Weight and Input should both be quantized" at lowering): such a linear runs on rows, only it."""
    from deployc.graph.quantize import RowsLinear, input_ranks, torchao_quantize
    from deployc.targets.backends.base import int8_dynamic_activations

    class Focal(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.spatial, self.tokens = torch.nn.Linear(8, 12), torch.nn.Linear(12, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.tokens(self.spatial(x).flatten(1, 2))

    torch.manual_seed(0)
    model, x = Focal().eval(), torch.randn(1, 3, 5, 8)
    with torch.no_grad():
        before = model(x)
        ranks = input_ranks(model, [x], torch.nn.Linear)
        assert ranks == {id(model.spatial): 4, id(model.tokens): 3}
        torchao_quantize(model, int8_dynamic_activations(8, None), None, ranks)
        assert type(model.spatial) is RowsLinear and type(model.tokens) is torch.nn.Linear
        assert torch.nn.functional.cosine_similarity(model(x).flatten(), before.flatten(), dim=0) > 0.999
    graph = torch.export.export(model, (x,), strict=False).graph
    shapes = [list(n.args[0].meta["val"].shape) for n in graph.nodes if n.target == torch.ops.aten.linear.default]
    assert shapes == [[15, 8], [1, 15, 12]]


def test_a_group_norm_of_one_group_becomes_a_layer_norm_with_the_same_values() -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 1), torch.nn.GroupNorm(1, 8), torch.nn.GroupNorm(2, 8),
                                torch.nn.GroupNorm(1, 8, affine=False)).eval()
    with torch.no_grad():
        model[1].weight.uniform_(0.5, 2.0)
        model[1].bias.uniform_(-1.0, 1.0)
    x = torch.randn(2, 3, 5, 7)
    before = model(x)
    weight = model[1].weight
    assert one_group_as_layer_norm(model) == 2
    assert [type(m).__name__ for m in model] == ["Conv2d", "OneGroupNorm", "GroupNorm", "OneGroupNorm"]
    assert model[1].weight is weight  # the same parameters, not copies
    torch.testing.assert_close(model(x), before, atol=1e-5, rtol=0)
    graph = torch.export.export(model, (x,), strict=False).graph
    targets = [str(n.target) for n in graph.nodes if n.op == "call_function"]
    assert targets.count("aten.layer_norm.default") == 2 and targets.count("aten.group_norm.default") == 1


def test_a_relu6_becomes_a_relu_and_a_minimum_with_the_same_values() -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU6(inplace=True), torch.nn.Hardtanh(-1.0, 1.0),
                                torch.nn.Hardtanh(0.0, 3.0)).eval()
    x = torch.randn(64, 4) * 10
    before = model(x)
    assert relu6_as_minimum(model) == 2
    assert [type(m).__name__ for m in model] == ["Linear", "ReLUMinimum", "Hardtanh", "ReLUMinimum"]
    assert torch.equal(model(x), before)
    targets = [str(n.target) for n in torch.export.export(model, (x,), strict=False).graph.nodes
               if n.op == "call_function"]
    assert targets.count("aten.minimum.default") == 2 and targets.count("aten.hardtanh.default") == 1


def test_a_strided_nine_by_nine_convolution_becomes_an_eleven_by_eleven_one_with_the_same_values() -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(8, 8, 9, stride=2, padding=4, groups=8),
                                torch.nn.Conv2d(8, 4, 9, stride=2, padding=(3, 2), bias=False),
                                torch.nn.Conv2d(4, 4, 9, stride=1, padding=4),  # stride 1: computed right
                                torch.nn.Conv2d(4, 4, 9, stride=2, padding=8, dilation=2)).eval()
    x = torch.randn(2, 8, 40, 40)
    before = model(x)
    assert strided_nine_by_nine_convs_widened(model) == 2
    assert [m.kernel_size for m in model] == [(11, 11), (11, 11), (9, 9), (9, 9)]
    assert model[0].padding == (5, 5) and model[1].padding == (4, 3) and model[0].groups == 8
    assert torch.allclose(model(x), before, rtol=0, atol=1e-5)


def test_only_qnn_s_fp16_widens_the_strided_nine_by_nine_convolution() -> None:
    """The HTP's int8 convolution of that shape computes it right: there it stays."""
    from deployc.core.quantization import Recipe
    from deployc.targets.backends import BACKENDS

    kernels = {}
    for name, scheme in (("qnn", "fp16"), ("qnn", "w8a8"), ("xnnpack", "fp32")):
        model = torch.nn.Sequential(torch.nn.Conv2d(32, 32, 9, stride=2, padding=4, groups=32))
        BACKENDS[name].adapt_model(model, Recipe(scheme=scheme, method="none" if scheme[:2] == "fp" else "pt2e"))
        kernels[name, scheme] = model[0].kernel_size
    assert kernels == {("qnn", "fp16"): (11, 11), ("qnn", "w8a8"): (9, 9), ("xnnpack", "fp32"): (9, 9)}


def test_sigmoids_and_silus_become_tanhs_with_the_same_values() -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.SiLU(), torch.nn.Linear(8, 8), torch.nn.Sigmoid()).eval()
    x = torch.randn(16, 8) * 4
    program = torch.export.export(model, (x,), strict=False).run_decompositions({})
    assert sigmoids_as_tanh(program.graph_module) == 2
    targets = [str(n.target) for n in program.graph.nodes if n.op == "call_function"]
    assert targets.count("aten.tanh.default") == 2 and not {"aten.sigmoid.default", "aten.silu.default"} & set(targets)
    assert torch.allclose(program.module()(x), model(x), rtol=0, atol=1e-6)


def test_a_product_with_a_sigmoid_becomes_a_sum_of_halves_with_the_same_values() -> None:
    """A swish (x * sigmoid(x)) and a squeeze-excite gate (y * sigmoid(g), g of another shape) become
    a/2 + a/2 * tanh(g/2); a sigmoid read elsewhere too keeps its tanh form there. Each node written has
    the value (shape, dtype) QNN's passes read."""

    class Gated(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = torch.nn.Conv2d(4, 8, 3, padding=1)
            self.squeeze = torch.nn.Conv2d(8, 8, 1)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            y = self.conv(x)
            y = y * torch.sigmoid(y)
            gate = torch.sigmoid(self.squeeze(y.mean((2, 3), keepdim=True)))
            return gate * y + gate

    torch.manual_seed(0)
    model = Gated().eval()
    x = torch.randn(1, 4, 6, 6) * 3
    program = torch.export.export(model, (x,), strict=False).run_decompositions({})
    assert sigmoids_as_tanh(program.graph_module) == 2
    calls = [n for n in program.graph.nodes if n.op == "call_function"]
    targets = [str(n.target) for n in calls]
    assert targets.count("aten.tanh.default") == 2 and "aten.sigmoid.default" not in targets
    assert targets.count("aten.add.Tensor") == 4  # the two products' sums, the gate's other read, the model's
    assert all(n.meta["val"].dtype == torch.float32 for n in calls)
    assert {tuple(n.meta["val"].shape) for n in calls if str(n.target) == "aten.tanh.default"} == {(1, 8, 6, 6),
                                                                                                 (1, 8, 1, 1)}
    assert torch.allclose(program.module()(x), model(x), rtol=0, atol=1e-5)


def test_a_batch_norm_s_epsilon_moves_into_its_variance_with_the_same_values() -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 1), torch.nn.BatchNorm2d(4, eps=1e-3),
                                torch.nn.BatchNorm2d(4), torch.nn.BatchNorm2d(4, track_running_stats=False))
    with torch.no_grad():
        model[1].running_var.uniform_(1e-4, 1e-2)
    model.eval()
    x = torch.randn(2, 3, 5, 7)
    before = model(x)
    variance = model[1].running_var.clone()
    assert batch_norm_eps_in_variance(model) == 2  # the norm without running statistics has none to move
    assert model[1].eps == 0.0 and model[3].eps == 1e-5
    torch.testing.assert_close(model[1].running_var, variance + 1e-3, atol=0, rtol=0)
    torch.testing.assert_close(model(x), before, atol=1e-6, rtol=1e-6)


def test_a_batch_norm_no_convolution_takes_in_becomes_a_multiply_and_an_add() -> None:
    """QNN's quantizer, after prepare_pt2e folded the norm that follows a convolution: the one left (after
    a residual sum) is x * scale + shift with the norm's own constants."""
    from torchao.quantization.pt2e.utils import _fuse_conv_bn_

    torch.manual_seed(0)

    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv, self.norm1, self.norm2 = torch.nn.Conv2d(4, 4, 3, padding=1), torch.nn.BatchNorm2d(4), \
                torch.nn.BatchNorm2d(4, eps=1e-3)
            with torch.no_grad():
                for norm in (self.norm1, self.norm2):
                    norm.running_var.uniform_(0.01, 2.0)
                    norm.running_mean.uniform_(-1.0, 1.0)
                    norm.weight.uniform_(0.5, 1.5)
                    norm.bias.uniform_(-0.5, 0.5)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.norm2(x + self.norm1(self.conv(x)))

    x = torch.randn(2, 4, 5, 5)
    model = Net().eval()
    before = model(x)
    module = torch.export.export(model, (x,), strict=False).module(check_guards=False)
    _fuse_conv_bn_(module)
    assert batch_norms_as_affine(module) == 1
    targets = [str(n.target) for n in module.graph.nodes if n.op == "call_function"]
    assert "aten.batch_norm.default" not in targets and targets.count("aten.mul.Tensor") == 1
    torch.testing.assert_close(module(x), before, atol=1e-5, rtol=1e-5)


def test_a_gather_of_constant_consecutive_indices_becomes_a_slice() -> None:
    """Falcon's shared key and value, cut out of the fused projection by a list index (the HTP's quantized
    Gather of it was unrelated to eager); indices that are not consecutive, or a mask, stay gathers."""

    class Net(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            heads = x.view(1, 4, 6, 8)
            key, pair = heads[..., [-2], :], heads[:, [1, 2]]
            spread, masked = heads[..., [0, 2], :], heads[:, torch.tensor([True, False, True, False])]
            return torch.cat([key.flatten(), pair.flatten(), spread.flatten(), masked.flatten()])

    x = torch.randn(1, 4, 48)
    before = Net()(x)
    module = torch.export.export(Net(), (x,), strict=False).module(check_guards=False)
    assert constant_gathers_as_slices(module) == 2
    targets = [str(n.target) for n in module.graph.nodes if n.op == "call_function"]
    assert targets.count("aten.index.Tensor") == 2 and targets.count("aten.slice.Tensor") >= 2
    assert torch.equal(module(x), before)


def test_a_clamp_from_zero_in_the_graph_becomes_a_relu_and_a_minimum() -> None:
    """MobileNetV3's hard swish (a functional, in-place ReLU6) and GhostNet's hard sigmoid (a clamp to
    [0, 1]), which no module rewrite reaches, and an in-place clamp whose input is read again (export
    reads the clamped value through the clamp's own output); a clamp not from 0 stays."""

    class Net(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            swish = x * torch.nn.functional.relu6(x + 3.0, inplace=True) / 6.0
            sigmoid = torch.clamp(x / 6.0 + 0.5, 0.0, 1.0)
            shifted = x - 1.0
            before_in_place = torch.clamp(shifted, 0.0, 1.0)  # a rewritten reader of what is clamped in place next
            read_again = torch.nn.functional.hardtanh(shifted, 0.0, 2.0, inplace=True) + shifted
            return swish + sigmoid + before_in_place + read_again + torch.clamp(x, -1.0, 1.0)

    x = torch.randn(2, 64) * 6
    before = Net()(x.clone())
    module = torch.export.export(Net(), (x.clone(),), strict=False).module(check_guards=False)
    with torch._subclasses.fake_tensor.FakeTensorMode() as mode:  # QNN's graph carries fake values
        for node in module.graph.nodes:
            if isinstance(node.meta.get("val"), torch.Tensor):
                node.meta["val"] = mode.from_tensor(node.meta["val"])
    assert clamps_as_relu_minimum(module) == 4
    targets = [str(n.target) for n in module.graph.nodes if n.op == "call_function"]
    assert targets.count("aten.minimum.default") == 4 and targets.count("aten.clamp.default") == 1
    assert not {"aten.relu6_.default", "aten.hardtanh_.default"} & set(targets)
    assert torch.equal(module(x.clone()), before)
