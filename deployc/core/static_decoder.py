"""What an app must know to drive a decoder built in the static form (graph/static_decoder.py): the
methods, their fixed chunk lengths, the KV caches it keeps between calls and how it updates them, and
the mask it builds for each call. Recorded in the program's facts and in the runtime config
(`static_decoder`); the drivers (pipeline/host/static_decoding.py, the native runner) read it."""

from __future__ import annotations

from typing import Literal

from deployc.core.records import Frozen

PREFILL, DECODE = "prefill", "decode"
# The verification's call that reads a stretch of text in prefill chunks and returns every position's logits.
SCORE = "score"
# Added to the score of a key a query must not see: finite, as in Qualcomm's masks, so that a 16-bit
# quantized mask keeps its range; exp(-255) is 0 in fp16 and in fp32.
MASKED = -255.0
# A decoder built with a first token (StaticDecoderLayout.prefix_token): that token's position 0, computed in
# float at build time, as the program's constant methods (no inputs): k and v rows float32[layers, kv_heads,
# head_dim], the logits float32[vocab].
PREFIX_K, PREFIX_V, PREFIX_LOGITS = "get_prefix_k", "get_prefix_v", "get_prefix_logits"
PREFIX_METHODS = (PREFIX_K, PREFIX_V, PREFIX_LOGITS)
MASK_LAYOUT = ("[1, 1, T, context + T]: keys are the cache slots, then the call's T tokens; the query at position "
               "p sees the slots before the call's first position and the call's own tokens up to p")


def pieces(n: int, chunk: int, own_decode: bool) -> list[tuple[bool, int, int]]:
    """How the driver reads n tokens: per call (single token, width of the call, real tokens in it). A prompt
    goes in chunks, the last one padded; a lone token through the decode method (width 1), or with one graph
    through the prefill method padded to its chunk."""
    out, done = [], 0
    while done < n:
        single = n - done == 1
        width = 1 if single and own_decode else chunk
        take = min(width, n - done)
        out.append((single, width, take))
        done += take
    return out


def driver_calls(reads: list[int], chunk: int, own_decode: bool) -> dict[str, int]:
    """Calls per method when the driver reads each of `reads` tokens in one forward call."""
    calls = {PREFILL: 0, DECODE: 0} if own_decode else {PREFILL: 0}
    for n in reads:
        for single, _, _ in pieces(n, chunk, own_decode):
            calls[DECODE if single and own_decode else PREFILL] += 1
    return calls


class StaticDecoderLayout(Frozen):
    """Both methods take (tokens int32[1, T], input_pos int32[T], mask float32[1, 1, T, context + T],
    k_cache_0..k_cache_{L-1}, v_cache_0..v_cache_{L-1}, each float32[1, kv_heads, context, head_dim]) and
    return (logits float32[1, T, vocab], k_0..k_{L-1}, v_0..v_{L-1}, each float32[1, kv_heads, T, head_dim]):
    T is `chunk` for the prefill method and 1 for the decode method. When `decode_method` is
    `prefill_method` (npu.decode: prefill), the program has that one method, and a single token goes
    through it padded to `chunk` like a prompt's last piece."""

    prefill_method: str = PREFILL
    decode_method: str = DECODE
    chunk: int  # tokens per prefill call; a shorter last piece is padded, its extra rows ignored
    context: int  # cache slots: slot j holds position j, so positions run 0..context-1
    layers: int
    kv_heads: int
    head_dim: int
    masked_value: float = MASKED
    # After each call the app writes the call's new k/v rows (the first n of T: the real tokens) into the
    # caches at slots input_pos; the mask lets the query at position p see slots < the call's first
    # position and the call's own tokens up to p.
    update: Literal["index_write"] = "index_write"
    # -1, or the token every prompt starts with (the model's bos): its position 0 is the same in every sequence,
    # so it was computed in float at build time (PREFIX_METHODS). A call from position 0 writes those rows into
    # slot 0 and runs the program from position 1. A sequence that starts with another token is refused: the
    # program's ranges were calibrated without a position 0 (SmolLM2-135M in 16a8w: its logits at 0.6 dB SQNR
    # from a random first token).
    prefix_token: int = -1

    def methods(self) -> list[tuple[str, int]]:
        """(name, tokens a call) of each method the program has."""
        own = [(self.decode_method, 1)] if self.decode_method != self.prefill_method else []
        return [(self.prefill_method, self.chunk), *own]

    def pieces(self, n: int) -> list[tuple[bool, int, int]]:
        return pieces(n, self.chunk, self.decode_method != self.prefill_method)

    def refusal(self, first: int) -> str:
        """Why a sequence from position 0 that starts with `first` instead of the prefix token is refused."""
        return (f"this decoder was built to start every sequence with token {self.prefix_token} (its bos, computed "
                f"in float at build time: npu.prefix); this one starts with {first}")

    def input_names(self) -> list[str]:
        return (["tokens", "input_pos", "mask"] + [f"k_cache_{i}" for i in range(self.layers)]
                + [f"v_cache_{i}" for i in range(self.layers)])

    def output_names(self) -> list[str]:
        return ["logits"] + [f"k_{i}" for i in range(self.layers)] + [f"v_{i}" for i in range(self.layers)]
