"""deployc's decoder (decoder.py) in the static form an NPU takes, the way Qualcomm's own Llama export
(executorch/examples/qualcomm/oss_scripts/llama/model/static_llama.py) shapes it: no state in the
program, every shape fixed.

    prefill / decode(tokens int32[1, T], input_pos int32[1, T], mask float32[1, T, C + T],
                     k_cache_0..L-1 float32[1, kv_heads, C, head_dim], v_cache_0..L-1 (same))
        -> logits float32[1, T, vocab], k_0..L-1 float32[1, kv_heads, T, head_dim], v_0..L-1 (same)

T is the method's chunk (prefill: the manifest's `npu.prefill`; decode: 1), C the context. Each call
attends over the caches (C slots, slot j holding position j) followed by its own T tokens; the mask says
which of those C + T keys each of the T queries sees (0) and which it does not (MASKED). The app keeps
the caches: after a call it writes the call's new k/v rows into the caches at their positions (an index
write). pipeline/host/static_decoder.py is that driver, and the native runner has the same.
"""

from __future__ import annotations

import math
from typing import cast

import torch
import torch.nn.functional as F
from torch import nn

from deployc.core.errors import BuildError
from deployc.core.static_decoder import MASKED, PREFILL, PREFIX_K, PREFIX_LOGITS, PREFIX_V, StaticDecoderLayout
from deployc.graph.decoder import Decoder, Layer, rotate_half
from deployc.plan.build_plan import StaticForm


class StaticDecoder(nn.Module):
    """One chunk length's static form of `decoder` (its weights, shared): export one per method."""

    rope_cos: torch.Tensor
    rope_sin: torch.Tensor

    def __init__(self, decoder: Decoder, context: int) -> None:
        super().__init__()
        self.decoder, self.context = decoder, context
        # The rotation of every position the caches hold: the dynamic decoder's table, cut to the context.
        self.register_buffer("rope_cos", decoder.rope_cos[:context].clone(), persistent=False)
        self.register_buffer("rope_sin", decoder.rope_sin[:context].clone(), persistent=False)

    def forward(self, tokens: torch.Tensor, input_pos: torch.Tensor, mask: torch.Tensor,
                *caches: torch.Tensor) -> tuple[torch.Tensor, ...]:
        d, c = self.decoder, self.decoder.config
        layers = len(d.model.layers)
        k_caches, v_caches = caches[:layers], caches[layers:]
        t = tokens.shape[1]
        x = d.model.embed_tokens(tokens)
        if d.embed_scale != 1.0:
            x = x * d.embed_scale
        cos, sin = self.rope_cos[input_pos], self.rope_sin[input_pos]
        new_k, new_v = [], []
        for layer, k_cache, v_cache in zip(cast(list[Layer], d.model.layers), k_caches, v_caches):
            a = layer.self_attn
            h = layer.input_layernorm(x)
            q = a.q_proj(h).view(1, t, c.heads, c.head_dim)
            k = a.k_proj(h).view(1, t, c.kv_heads, c.head_dim)
            v = a.v_proj(h).view(1, t, c.kv_heads, c.head_dim).transpose(1, 2)
            if c.qk_norm:  # as decoder.py: on a 2-D view
                q = a.q_norm(q.reshape(-1, c.head_dim)).view(1, t, c.heads, c.head_dim)
                k = a.k_norm(k.reshape(-1, c.head_dim)).view(1, t, c.kv_heads, c.head_dim)
            q, k = q.transpose(1, 2), k.transpose(1, 2)
            q = q * cos + rotate_half(q) * sin
            k = k * cos + rotate_half(k) * sin
            new_k.append(k)
            new_v.append(v)
            keys, values = torch.cat([k_cache, k], dim=2), torch.cat([v_cache, v], dim=2)
            # Grouped-query attention without repeating the caches: the queries of each kv head's group
            # side by side ([1, kv_heads, group * T, head_dim]), every tensor 4-D (the HTP took no 5-D
            # reshape of repeat_interleave in 16a8w: those stayed on the CPU, split the graph in ten).
            group = c.heads // c.kv_heads
            scores = (q.reshape(1, c.kv_heads, group * t, c.head_dim) @ keys.transpose(2, 3)) / math.sqrt(c.head_dim)
            weights = F.softmax(scores.reshape(1, c.heads, t, -1) + mask, dim=-1)
            out = (weights.reshape(1, c.kv_heads, group * t, -1) @ values).reshape(1, c.heads, t, c.head_dim)
            x = x + a.o_proj(out.transpose(1, 2).reshape(1, t, c.heads * c.head_dim))
            x = x + layer.mlp(layer.post_attention_layernorm(x))
        logits = d.lm_head(d.model.norm(x))
        return (logits, *new_k, *new_v)


def layout(decoder: Decoder, form: StaticForm) -> StaticDecoderLayout:
    c = decoder.config
    one = {"decode_method": PREFILL} if form.decode == "prefill" else {}
    return StaticDecoderLayout(chunk=form.prefill, context=form.context, layers=c.layers, kv_heads=c.kv_heads,
                               head_dim=c.head_dim, prefix_token=-1 if form.prefix_token is None else form.prefix_token,
                               **one)


def example_inputs(decoder: Decoder, context: int, chunk: int) -> list[torch.Tensor]:
    """Inputs of the right shapes for export (a call at position 0 into empty caches)."""
    c = decoder.config
    cache = (1, c.kv_heads, context, c.head_dim)
    mask = torch.full((1, 1, chunk, context + chunk), MASKED)
    mask[..., context:] = torch.triu(torch.full((chunk, chunk), MASKED), diagonal=1)
    caches = [torch.zeros(cache) for _ in range(2 * c.layers)]
    return [torch.zeros(1, chunk, dtype=torch.int32), torch.arange(chunk, dtype=torch.int32), mask, *caches]


def prefix_rows(static: StaticDecoder, shapes: StaticDecoderLayout) -> dict[str, torch.Tensor]:
    """Position 0 of the layout's first token in float, keyed by constant method: k and v [layers, kv_heads,
    head_dim], logits [vocab]. A Llama's first position carries activations tens of times larger than any
    other (SmolLM2-135M: 24,926 from its 12th layer, elsewhere at most 1,037 over 1,284 tokens); in the program
    they would set the 16-bit step of every residual add. Computed here, the program starts at position 1."""
    inputs = example_inputs(static.decoder, shapes.context, 1)
    inputs[0][0, 0] = shapes.prefix_token
    with torch.no_grad():
        outputs = static(*inputs)
    layers = shapes.layers
    return {PREFIX_K: torch.stack([k[0, :, 0] for k in outputs[1:1 + layers]]).contiguous(),
            PREFIX_V: torch.stack([v[0, :, 0] for v in outputs[1 + layers:]]).contiguous(),
            PREFIX_LOGITS: outputs[0][0, 0].contiguous()}


def starting_with_prefix(inputs: list[torch.Tensor], form: StaticForm | None) -> list[torch.Tensor]:
    """Seeded decoder inputs (tokens [1, T], input_pos [T]) from position 0, their first token the form's prefix
    token where it has one: as every prompt starts, and as its driver requires."""
    if form is not None and form.prefix_token is not None and int(inputs[1].reshape(-1)[0]) == 0:
        inputs[0].reshape(-1)[0] = form.prefix_token
    return inputs


def static_form(model: torch.nn.Module, form: StaticForm) -> tuple[StaticDecoder, StaticDecoderLayout]:
    """The static form of a loaded decoder, or why there is none."""
    if not isinstance(model, Decoder):
        raise BuildError(f"the static form is made from deployc's decoder (a Llama-family Hugging Face directory, or "
                         f"a factory returning deployc.graph.decoder.Decoder); this model is a "
                         f"{type(model).__name__}")
    if model.cache_len < form.context:
        raise BuildError(f"npu.context {form.context} is beyond the {model.cache_len} positions the decoder's rotary "
                         "table was made for")
    return StaticDecoder(model, form.context).eval(), layout(model, form)


def export_static(static: StaticDecoder, shapes: StaticDecoderLayout) -> dict[str, torch.export.ExportedProgram]:
    """Each method at its own chunk length: prefill and decode, or the one method serving both."""
    from deployc.graph.export import export_model

    decoder = static.decoder
    return {name: export_model(static, example_inputs(decoder, shapes.context, chunk), [], [], by_name=False)
            for name, chunk in shapes.methods()}


def calibration_calls(static: StaticDecoder, shapes: StaticDecoderLayout, sequences: list[list[int]],
                      prefix: dict[str, torch.Tensor] | None = None) -> dict[str, list[list[torch.Tensor]]]:
    """Each method's inputs as the driver makes them when the eager static form reads `sequences`.

    Two methods: the first half of each sequence in prefill chunks, the rest one token a call, so the decode
    method is calibrated on caches that hold real text; then each sequence's first `chunk` tokens again one
    token a call from position 0, as a generation after a short prompt reads them. Without those, the decode
    method never saw a query with few keys to attend to, whose attention output is one value row rather than
    an average of many: measured on the zoo's seeded Llama in 16a8w, a one-token prompt's logits came out at
    2.8 dB (the range clipped), 43.1 dB with them.

    One graph (npu.decode: prefill): each sequence in whole chunks from position 0. A chunk's rows are what a
    decode step's real row is (a token attending to the cache and itself), its first rows attending to few
    keys; a one-token step would cost a whole chunk's compute for one row, and its padding rows (the last
    token repeated) would be most of what the observers saw.

    With a first token (`prefix`: prefix_rows), a sequence that starts with it has its position 0 from those
    float rows, as the app's driver does: the observers never see that position's activations."""
    import numpy as np

    from deployc.pipeline.host.static_decoding import StaticDecoding

    calls: dict[str, list[list[torch.Tensor]]] = {name: [] for name, _ in shapes.methods()}

    def call(method: str, inputs: list[np.ndarray]) -> list[np.ndarray]:
        if prefix is not None and method in prefix:  # the build's float rows: what the program will hold
            return [prefix[method].numpy()]
        tensors = [torch.from_numpy(np.ascontiguousarray(x)) for x in inputs]
        calls[method].append(tensors)
        with torch.no_grad():
            return [t.numpy() for t in static(*tensors)]

    one_graph = shapes.decode_method == shapes.prefill_method
    for ids in sequences:
        ids = ids[:shapes.context]
        session = StaticDecoding(shapes, call)
        if one_graph:
            session.forward(np.asarray([ids]), np.arange(len(ids)))
            continue
        half = max(1, len(ids) // 2)
        session.forward(np.asarray([ids[:half]]), np.arange(half))
        for position in range(half, len(ids)):
            session.forward(np.asarray([[ids[position]]]), np.asarray([position]))
        session = StaticDecoding(shapes, call)
        for position, token in enumerate(ids[:shapes.chunk]):
            session.forward(np.asarray([[token]]), np.asarray([position]))
    return calls
