"""The static form of deployc's decoder (graph/static_decoder.py: KV caches in and out, fixed chunks,
masks as inputs) driven by pipeline/host/static_decoding.py computes what the decoder with its cache
inside computes: prompts longer and shorter than a chunk, decoding after them, a second prompt over the
first's cache, every architecture the decoder knows."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from test_decoder import ARCHS, BASE, save_decoder

torch = pytest.importorskip("torch")


def _eager_call(static: torch.nn.Module):  # type: ignore[no-untyped-def]
    def call(method: str, inputs: list[np.ndarray]) -> list[np.ndarray]:
        with torch.no_grad():
            return [t.numpy() for t in static(*[torch.from_numpy(np.ascontiguousarray(x)) for x in inputs])]
    return call


@pytest.mark.parametrize("arch", list(ARCHS))
def test_the_static_form_driven_in_chunks_computes_what_the_cached_decoder_computes(tmp_path: Path,
                                                                                    arch: str) -> None:
    from deployc.graph.decoder import load_decoder
    from deployc.graph.static_decoder import StaticDecoder, layout
    from deployc.pipeline.host.static_decoding import StaticDecoding

    save_decoder(tmp_path / arch, arch)
    context, chunk = 48, 8
    cached = load_decoder(tmp_path / arch, context)
    session = StaticDecoding(layout(cached, context, chunk), _eager_call(StaticDecoder(cached, context).eval()))
    g = torch.Generator().manual_seed(3)
    # 19 tokens: two full chunks and a padded one; then 3 decodes; then a shorter prompt over the same caches.
    calls = [torch.randint(0, BASE["vocab_size"], (1, 19), generator=g)]
    calls += [torch.randint(0, BASE["vocab_size"], (1, 1), generator=g) for _ in range(3)]
    second = torch.randint(0, BASE["vocab_size"], (1, 5), generator=g)
    with torch.no_grad():
        pos = 0
        for tokens in calls:
            positions = torch.arange(pos, pos + tokens.shape[1])
            want = cached(tokens, positions)
            got = session.forward(tokens.numpy(), positions.numpy())
            assert got.shape == (1, BASE["vocab_size"])
            assert np.allclose(got, want.numpy(), atol=1e-4), f"{arch} at positions {pos}..{int(positions[-1])}"
            pos += tokens.shape[1]
        want = cached(second, torch.arange(5))
        assert np.allclose(session.forward(second.numpy(), np.arange(5)), want.numpy(), atol=1e-4)


def test_a_call_beyond_the_context_is_refused_before_the_program_runs() -> None:
    from deployc.core.static_decoder import StaticDecoderLayout
    from deployc.pipeline.host.static_decoding import StaticDecoding

    ran: list[str] = []
    session = StaticDecoding(StaticDecoderLayout(chunk=4, context=8, layers=1, kv_heads=1, head_dim=2),
                             lambda method, inputs: ran.append(method) or [])
    with pytest.raises(ValueError, match=r"positions 6\.\.8 are beyond the context of 8"):
        session.forward(np.zeros((1, 3)), np.arange(6, 9))
    with pytest.raises(ValueError, match="consecutive"):
        session.forward(np.zeros((1, 2)), np.array([0, 2]))
    assert ran == []
