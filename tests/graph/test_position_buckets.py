"""T5-style relative position buckets turned into constants for static lengths
(deployc/graph/position_buckets.py): the bias equals the model's own at every length and offset, the
exported graph at a static length has no log (whose log(0) broke QNN's quantized T5) and no int64
negation (MPNet's, which the HTP has no kernel for), and symbolic lengths keep the model's code."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from deployc.graph.position_buckets import constant_position_buckets  # noqa: E402

CONFIG = {"vocab_size": 50, "d_model": 16, "d_kv": 4, "d_ff": 32, "num_layers": 1, "num_heads": 2,
          "decoder_start_token_id": 0, "relative_attention_num_buckets": 8,
          "relative_attention_max_distance": 12}


class Hidden(torch.nn.Module):
    """An encoder's last hidden states from token ids: what the export sees."""

    def __init__(self, model) -> None:
        super().__init__()
        self.model = model

    def forward(self, x):
        return self.model(input_ids=x).last_hidden_state


def _exported_ops(model, ids) -> set[str]:
    graph = torch.export.export(Hidden(model), (ids,), strict=False).graph
    return {str(n.target) for n in graph.nodes if n.op == "call_function"}


def _attentions(model):
    return [m for m in model.modules() if getattr(m, "has_relative_attention_bias", False)]


def test_bias_equals_the_models_own_at_every_length_and_offset():
    torch.manual_seed(0)
    model = transformers.T5Model(transformers.T5Config(**CONFIG)).eval()
    attentions = _attentions(model)
    assert {a.is_decoder for a in attentions} == {False, True}  # both bucket rules: bidirectional and causal
    cases = [(q, k, past) for q in (1, 3, 12, 40) for k in (1, 12, 40) for past in (0, 5)]
    expected = {(id(a), c): a.compute_bias(c[0], c[1], past_seen_tokens=c[2]) for a in attentions for c in cases}
    assert constant_position_buckets(model) == 2
    for a in attentions:
        for c in cases:
            assert torch.equal(a.compute_bias(c[0], c[1], past_seen_tokens=c[2]), expected[id(a), c]), c


def test_static_export_has_no_log_and_the_same_outputs():
    torch.manual_seed(0)
    model = transformers.T5EncoderModel(transformers.T5Config(**CONFIG)).eval()
    ids = torch.randint(0, 50, (1, 10))
    before = model(input_ids=ids).last_hidden_state

    assert "aten.log.default" in _exported_ops(model, ids)
    constant_position_buckets(model)
    assert "aten.log.default" not in _exported_ops(model, ids)
    assert torch.equal(model(input_ids=ids).last_hidden_state, before)
    seq = torch.export.Dim("seq", min=2, max=32)  # symbolic: the model's own code, still exportable
    dynamic = torch.export.export(Hidden(model), (ids,), dynamic_shapes=({1: seq},), strict=False)
    assert "aten.log.default" in {str(n.target) for n in dynamic.graph.nodes if n.op == "call_function"}
    assert torch.allclose(dynamic.module()(ids[:, :7]), model(input_ids=ids[:, :7]).last_hidden_state)


def test_mpnet_bias_is_the_same_and_its_graph_has_no_log_or_negation():
    torch.manual_seed(0)
    model = transformers.MPNetModel(transformers.MPNetConfig(
        vocab_size=50, hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32,
        max_position_embeddings=300)).eval()
    encoder = model.encoder
    expected = {n: encoder.compute_position_bias(torch.zeros(2, n, 16)) for n in (1, 7, 200)}
    ids = torch.randint(3, 50, (1, 9))
    before = model(input_ids=ids).last_hidden_state
    assert constant_position_buckets(model) == 1
    for n, bias in expected.items():
        assert torch.equal(encoder.compute_position_bias(torch.zeros(2, n, 16)), bias), n
    assert torch.equal(model(input_ids=ids).last_hidden_state, before)

    assert not _exported_ops(model, ids) & {"aten.log.default", "aten.neg.default"}


def test_wavlm_bias_is_the_same_and_its_graph_has_no_log():
    torch.manual_seed(0)
    config = transformers.WavLMConfig(hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                                      intermediate_size=32, conv_dim=(16, 16), conv_stride=(5, 2),
                                      conv_kernel=(10, 3), num_conv_pos_embeddings=16,
                                      num_conv_pos_embedding_groups=2, num_buckets=32, max_bucket_distance=40)
    model = transformers.WavLMModel(config).eval()
    attention = next(m for m in model.modules() if hasattr(m, "rel_attn_embed"))
    expected = {(q, k): attention.compute_bias(q, k) for q in (1, 9, 60) for k in (1, 9, 60)}
    audio = torch.randn(1, 400)
    before = model(audio).last_hidden_state
    log_before = "aten.log.default" in {str(n.target) for n in torch.export.export(
        model, (audio,), strict=False).graph.nodes}
    assert constant_position_buckets(model) == 1
    for (q, k), bias in expected.items():
        assert torch.equal(attention.compute_bias(q, k), bias), (q, k)
    assert torch.equal(model(audio).last_hidden_state, before)
    after = {str(n.target) for n in torch.export.export(model, (audio,), strict=False).graph.nodes}
    assert log_before and "aten.log.default" not in after
