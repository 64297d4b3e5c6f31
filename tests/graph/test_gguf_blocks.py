"""The gguf scheme's blocks: recovered from the dequantized weights bit for bit, computed as XNNPACK's 4-bit
kernels compute them plus the blocks' offsets, the activations' int8 residual taken again."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from helpers import gguf_files
from helpers.gguf_files import write_gguf

from deployc.core import gguf, gguf_model
from deployc.core.errors import BuildError
from deployc.graph.decoder import Decoder, decoder_from_weights, rotate_half
from deployc.graph.gguf_blocks import (
    BlockLinear,
    Blocks,
    ByteEmbedding,
    Fused,
    PooledRMSNorm,
    RotationProduct,
    Shared,
    int8_per_token,
    keep_blocks,
    q4_1,
    q8_0,
    recover,
    stacked,
)


@pytest.fixture(scope="module")
def weights(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, dict[str, torch.Tensor]]:
    f = gguf.read(write_gguf(tmp_path_factory.mktemp("gguf") / "tiny.gguf"))
    return gguf_model.hf_config(f), {k: torch.from_numpy(v) for k, v in gguf_model.state_dict(f).items()}


def _decoder(weights: tuple[dict, dict[str, torch.Tensor]]) -> Decoder:
    return decoder_from_weights(weights[0], dict(weights[1]), 32, "tiny.gguf").eval()


def test_every_block_kind_is_recovered_bit_for_bit(weights: tuple[dict, dict[str, torch.Tensor]]) -> None:
    state = weights[1]
    kinds = {name: recover(state[name]).kind for name in (  # type: ignore[union-attr]
        "model.layers.0.mlp.up_proj.weight", "model.layers.0.mlp.down_proj.weight", "model.embed_tokens.weight")}
    assert kinds == {"model.layers.0.mlp.up_proj.weight": "Q4_1", "model.layers.0.mlp.down_proj.weight": "Q4_0",
                     "model.embed_tokens.weight": "Q8_0"}
    b = recover(state["model.layers.0.mlp.up_proj.weight"])
    assert b is not None and b.minimum is not None and int(b.codes.min()) >= 0 and int(b.codes.max()) <= 15
    back = b.codes.float().reshape(128, -1, 32) * b.scale[..., None] + b.minimum[..., None]
    assert torch.equal(back.reshape(128, 64), state["model.layers.0.mlp.up_proj.weight"])
    assert recover(torch.randn(8, 64)) is None  # float weights are on no grid


def test_the_model_keeps_its_blocks_and_stays_within_the_residuals_error(
        weights: tuple[dict, dict[str, torch.Tensor]]) -> None:
    ref, kept, once = _decoder(weights), _decoder(weights), _decoder(weights)
    kinds = keep_blocks(kept)
    keep_blocks(once, residual=False)
    assert kinds["lm_head"] == "Q8_0" and kinds["model.embed_tokens"] == "Q8_0 table"
    assert kinds["model.layers.0.mlp.down_proj"] == "Q4_0" and kinds["model.layers.0.self_attn.q_proj"] == "Q4_1"
    assert isinstance(kept.lm_head, BlockLinear) and len(kept.lm_head.parts) == 2
    assert isinstance(kept.model.embed_tokens, ByteEmbedding)
    layer = kept.model.layers[0]  # linears of one input are one linear of their stacked blocks: q, k and v; ...
    assert isinstance(layer.self_attn.shared, Fused) and layer.self_attn.shared.sizes == [64, 32, 32]
    assert isinstance(layer.mlp.shared, Fused) and not hasattr(layer.mlp, "gate_proj")  # ... gate and up
    assert isinstance(layer.input_layernorm, PooledRMSNorm) and isinstance(kept.model.norm, PooledRMSNorm)
    assert isinstance(layer.self_attn.rotate, RotationProduct)
    tokens, pos = torch.tensor([[1, 50, 7, 200, 31, 9]]), torch.arange(6)
    with torch.no_grad():
        want, got, coarse = ref(tokens, pos), kept(tokens, pos), once(tokens, pos)
    error, coarse_error = ((got - want).norm() / want.norm()).item(), ((coarse - want).norm() / want.norm()).item()
    assert error < 3e-4 and coarse_error > 20 * error  # int8 activations once: 1e-2; with their residual: 6e-5
    assert torch.equal(kept.model.embed_tokens(tokens), ref.model.embed_tokens(tokens))  # the table: exact


def test_the_int8_image_is_xnnpacks_grid() -> None:
    """Per row: the range (0 included) over 255 steps, an integer zero point, rounding half to even as XNNPACK's
    conversion kernels do (0.5 here is 42.5 steps: 42)."""
    x = torch.tensor([[-1.0, 0.5, 2.0, 0.0]])
    scale = 3.0 / 255
    assert torch.allclose(int8_per_token(x), torch.tensor([[-85.0, 42.0, 170.0, 0.0]]) * scale)
    g = torch.Generator().manual_seed(1)
    rows = torch.randn(1, 7, 96, generator=g) * torch.linspace(0.1, 20, 96)
    lo, hi = rows.amin(-1, keepdim=True).clamp(max=0), rows.amax(-1, keepdim=True).clamp(min=0)
    step = (hi - lo) / 255
    zero = torch.clamp(-128 - torch.round(lo / step), -128, 127)
    want = (torch.clamp(torch.round(rows / step) + zero, -128, 127) - zero) * step
    assert torch.equal(int8_per_token(rows), want)
    assert torch.equal(int8_per_token(rows[0]), want[0])  # a 2-D input (the output layer's) the same


def test_float_weights_round_as_llama_cpp_rounds_them() -> None:
    """A float checkpoint's weights in the gguf scheme: Q4_1 and Q8_0 blocks equal to llama.cpp's quantizers'
    (the test's copies of quantize_row_q4_1 / q8_0, read back by deployc's GGUF reader), a tie included."""
    w = np.random.default_rng(3).normal(0, 0.02, (48, 96)).astype(np.float32)
    w[0, :32] = 0.5  # a constant block: scale 0
    w[1, :32] = np.arange(32) / 62 - 0.25  # ties at x.5 codes
    for ours, theirs, type_id in ((q4_1, gguf_files.q4_1, 3), (q8_0, gguf_files.q8_0, 8)):
        raw = np.frombuffer(theirs(w), dtype=np.uint8)
        want = gguf.dequantize(raw, gguf.Tensor("w", w.shape, type_id, 0, raw.size))
        blocks = ours(torch.from_numpy(w))
        got = blocks.codes.float().reshape(48, 3, 32) * blocks.scale[..., None]
        if blocks.minimum is not None:
            got = got + blocks.minimum[..., None]
        assert torch.equal(got.reshape(48, 96), torch.from_numpy(want))
        assert recover(got.reshape(48, 96)).kind == blocks.kind  # and the scheme's own check finds them again


def test_a_float_model_is_rounded_its_tied_output_layer_as_the_table() -> None:
    table = torch.nn.Embedding(40, 64)
    model = torch.nn.ModuleDict({"embed": table, "proj": torch.nn.Linear(64, 32, bias=False),
                                 "head": torch.nn.Linear(64, 40, bias=False)})
    model["head"].weight = table.weight
    assert keep_blocks(model, round_float=True) == {"proj": "Q4_1", "head": "Q8_0", "embed": "Q8_0 table"}
    odd = torch.nn.Sequential(torch.nn.Linear(48, 8, bias=False))
    with pytest.raises(BuildError, match=r"^0: 48 inputs are not whole blocks of 32"):
        keep_blocks(odd, round_float=True)


def test_a_model_not_from_a_gguf_file_is_refused_naming_the_layer() -> None:
    model = torch.nn.Sequential(torch.nn.Linear(64, 8, bias=False))
    with pytest.raises(BuildError, match=r"^0's weights are not the blocks of a GGUF file"):
        keep_blocks(model)


def test_negative_and_zero_scales_become_positive_ones_with_the_same_values() -> None:
    """XNNPACK takes positive block scales only: Q4_0's scale is negative when a block's largest magnitude is
    positive, and a constant block has none."""
    g = torch.Generator().manual_seed(0)
    codes = torch.randint(0, 16, (4, 64), generator=g).to(torch.int8)
    scale = torch.tensor([[0.02, -0.03], [-0.01, 0.0], [0.5, 0.25], [-1.0, 0.125]])
    blocks = Blocks("Q4_0", codes, scale, None)
    weight = ((codes.float() - 8).reshape(4, 2, 32) * scale[..., None]).reshape(4, 64)
    linear = BlockLinear(blocks, residual=True)
    assert all(bool((p.weight.scale > 0).all()) for p in linear.parts)
    x = torch.randn(3, 64, generator=g)
    want = torch.nn.functional.linear(x, weight)
    assert ((linear(x) - want).norm() / want.norm()).item() < 1e-4


def test_linears_of_one_input_computed_as_one_give_each_ones_outputs(
        weights: tuple[dict, dict[str, torch.Tensor]]) -> None:
    """q, k and v stacked into one linear: each output channel is its own linear's, to float rounding; blocks of
    different kinds (a Q4_0 v beside Q4_1 q and k) stay apart, sharing the input's residual (`Shared`)."""
    state = weights[1]
    names = [f"model.layers.0.self_attn.{n}_proj.weight" for n in ("q", "k", "v")]
    blocks = [recover(state[n]) for n in names]
    assert all(b is not None and b.kind == "Q4_1" for b in blocks)
    together = stacked(blocks)  # type: ignore[arg-type]
    assert together is not None and together.codes.shape == (128, 64) and together.minimum is not None
    fused, apart = Fused(together, [64, 32, 32], residual=True), Shared([BlockLinear(b, True) for b in blocks])  # type: ignore[arg-type]
    x = torch.randn(5, 64)
    with torch.no_grad():
        for one, each in zip(fused(x), apart(x), strict=True):
            assert one.is_contiguous() and torch.allclose(one, each, rtol=0, atol=1e-5)
    q4_0 = Blocks("Q4_0", blocks[2].codes, blocks[2].scale, None)  # type: ignore[union-attr]
    assert stacked([blocks[0], blocks[1], q4_0]) is None  # type: ignore[list-item]


def test_rotate_half_as_a_product_is_exact() -> None:
    """The halves' swap as a linear with a signed permutation matrix: every output is one input, bit for bit."""
    x = torch.randn(1, 9, 7, 64) * 1e3
    assert torch.equal(RotationProduct(64)(x), rotate_half(x))
