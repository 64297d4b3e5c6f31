"""The pure functions that decide numbers and shapes, tested directly (the build tests reach them only
through slow builds): metrics, chunking, token choice, dim points, output comparison."""

from __future__ import annotations

import math

import numpy as np
import pytest

from deployc.build.programs import compare_outputs
from deployc.core.facts import Metrics, PointMetrics, SizeRange, Summary, TensorFacts
from deployc.graph.metrics import EXACT_SQNR_DB, compare, judge, summarize
from deployc.load.manifest import ModelSpec
from deployc.packaging.corpus import chunk_text
from deployc.pipeline.host.generation import choose, fit_prompt, frame_tokens, generate
from deployc.plan.build_plan import DimPlan, OutputPlan
from deployc.plan.planner import verification_points, with_short_prompt

# ---- metrics -------------------------------------------------------------------------------------------

def test_identical_outputs_are_exact() -> None:
    x = np.array([1.0, -2.0, 3.0])
    assert compare(x, x) == Metrics(max_abs=0.0, cosine=1.0, sqnr_db=EXACT_SQNR_DB)


def test_metrics_of_a_known_error() -> None:
    ref = np.array([3.0, 4.0])  # |ref|^2 = 25
    out = np.array([3.0, 4.5])  # noise 0.25 -> SQNR 10*log10(100) = 20 dB
    m = compare(ref, out)
    assert m.max_abs == pytest.approx(0.5)
    assert m.sqnr_db == pytest.approx(20.0)
    assert m.cosine == pytest.approx((9 + 18) / (5 * math.hypot(3, 4.5)))


def test_metrics_edge_cases() -> None:
    zero = np.zeros(3)
    assert compare(zero, zero).cosine == 1.0
    assert compare(zero, np.ones(3)).cosine == 0.0 and compare(zero, np.ones(3)).sqnr_db == -EXACT_SQNR_DB
    assert compare(np.ones(3), -np.ones(3)).cosine == pytest.approx(-1.0)
    with pytest.raises(ValueError, match=r"output shape \[2\] differs from eager \[3\]"):
        compare(np.ones(3), np.ones(2))


def test_summary_is_the_worst_of_every_output_at_every_point() -> None:
    points = [PointMetrics(method="forward", dims={"n": 1}, outputs=[Metrics(max_abs=0.1, cosine=0.999, sqnr_db=30),
                                                                      Metrics(max_abs=0.3, cosine=0.99, sqnr_db=40)]),
              PointMetrics(method="forward", dims={"n": 4}, outputs=[Metrics(max_abs=0.2, cosine=0.995, sqnr_db=25)])]
    assert summarize(points) == Summary(max_abs=0.3, min_cosine=0.99, min_sqnr_db=25)


def test_judge_names_every_tolerance_missed() -> None:
    s = Summary(max_abs=0.5, min_cosine=0.98, min_sqnr_db=15.0)
    assert judge(s, 0.98, 15.0, 0.5) == []
    assert judge(s, 0.99, 20.0, 0.1) == ["cosine 0.980000 < 0.99", "SQNR 15.00 dB < 20.0 dB", "max abs error 0.5 > 0.1"]
    assert judge(s, 0.9, 10.0, None) == []


# ---- chunking ------------------------------------------------------------------------------------------

def test_chunks_overlap_and_cover_every_word() -> None:
    text = " ".join(f"w{i}" for i in range(10))
    assert chunk_text(text, words=4, overlap=1) == ["w0 w1 w2 w3", "w3 w4 w5 w6", "w6 w7 w8 w9"]
    assert chunk_text(text, words=4, overlap=0) == ["w0 w1 w2 w3", "w4 w5 w6 w7", "w8 w9"]
    assert chunk_text(text, words=20, overlap=5) == [text]
    assert chunk_text("  \n ", words=4, overlap=1) == []


# ---- token choice --------------------------------------------------------------------------------------

def test_greedy_takes_the_largest_logit() -> None:
    rng = np.random.default_rng(0)
    assert choose(np.array([0.1, 3.0, 2.9]), temperature=0.0, top_p=1.0, rng=rng) == 1


def test_top_p_keeps_only_the_nucleus() -> None:
    logits = np.log(np.array([0.6, 0.3, 0.05, 0.05]))
    rng = np.random.default_rng(1)
    picks = {choose(logits, temperature=1.0, top_p=0.7, rng=rng) for _ in range(200)}
    assert picks == {0, 1}  # 0.6 alone is under 0.7; 0.6 + 0.3 covers it
    rng = np.random.default_rng(1)
    assert {choose(logits, temperature=1.0, top_p=0.5, rng=rng) for _ in range(50)} == {0}


def test_sampling_is_seeded() -> None:
    logits = np.zeros(50)
    a = [choose(logits, 1.0, 1.0, np.random.default_rng(7)) for _ in range(5)]
    b = [choose(logits, 1.0, 1.0, np.random.default_rng(7)) for _ in range(5)]
    assert a == b


def test_generate_stops_at_eos_and_feeds_positions() -> None:
    calls: list[tuple[list[int], list[int]]] = []

    def step(tokens: np.ndarray, positions: np.ndarray) -> np.ndarray:
        calls.append((tokens.reshape(-1).tolist(), positions.tolist()))
        nxt = {0: 5, 1: 6, 2: 9}[len(calls) - 1]  # then the eos id 9
        out = np.zeros(10)
        out[nxt] = 1.0
        return out

    assert generate(step, [1, 2, 3], max_new_tokens=8, max_seq_len=64, eos_ids=[9]) == [5, 6]
    assert calls == [([1, 2, 3], [0, 1, 2]), ([5], [3]), ([6], [4])]


def test_a_long_prompt_keeps_its_frame_and_the_messages_end() -> None:
    # bos 1, the chat prefix 7 8, the message 20..29, the suffix 8 9
    ids = [1, 7, 8, *range(20, 30), 8, 9]
    frame = frame_tokens(ids, [1], [7, 8], [8, 9])
    assert frame == (3, 2)
    assert fit_prompt(ids, 8, *frame) == [1, 7, 8, 27, 28, 29, 8, 9]
    assert fit_prompt(ids, len(ids), *frame) == ids  # fits: whole
    assert fit_prompt(ids, 5, *frame) == ids[-5:]  # the frame alone fills the room: the last tokens
    # A message merged with the prefix's last token: only bos is kept in front.
    assert frame_tokens([1, 7, 99, 20, 8, 9], [1], [7, 8], [8, 9]) == (1, 2)
    assert frame_tokens([7, 8, 20], [], [7, 8], [8, 9]) == (2, 0)
    calls: list[list[int]] = []

    def step(tokens: np.ndarray, positions: np.ndarray) -> np.ndarray:
        calls.append(tokens.reshape(-1).tolist())
        return np.eye(40)[0]

    generate(step, ids, max_new_tokens=2, max_seq_len=10, eos_ids=[0], frame=frame)
    assert calls == [[1, 7, 8, 27, 28, 29, 8, 9]]


# ---- dim points ----------------------------------------------------------------------------------------

def test_verification_points_are_min_mid_max_deduplicated() -> None:
    assert verification_points([]) == [{}]
    assert verification_points([DimPlan(name="b", min=1, max=8)]) == [{"b": 1}, {"b": 4}, {"b": 8}]
    assert verification_points([DimPlan(name="b", min=2, max=3)]) == [{"b": 2}, {"b": 3}]
    assert verification_points([DimPlan(name="b", min=5, max=5)]) == [{"b": 5}]
    assert verification_points([DimPlan(name="b", min=1, max=4), DimPlan(name="s", min=8, max=64)]) == [
        {"b": 1, "s": 8}, {"b": 2, "s": 36}, {"b": 4, "s": 64}]


def test_a_decoder_gets_a_short_prompt_after_its_shortest_where_its_token_dim_has_room() -> None:
    spec = ModelSpec.model_validate({"source": {"factory": "m:f"}, "task": "text-generation", "inputs": {
        "tokens": {"shape": [1, "seq"], "dtype": "int64"}, "input_pos": {"shape": ["seq"], "dtype": "int64"}}})
    seq = [DimPlan(name="seq", min=1, max=512)]
    assert with_short_prompt(verification_points(seq), spec, seq) == [{"seq": 1}, {"seq": 17}, {"seq": 256},
                                                                       {"seq": 512}]
    short = [DimPlan(name="seq", min=1, max=32)]  # 17 is past the middle (16): min, middle and max as before
    assert with_short_prompt(verification_points(short), spec, short) == [{"seq": 1}, {"seq": 16}, {"seq": 32}]
    fixed = ModelSpec.model_validate({"source": {"factory": "m:f"}, "inputs": {"tokens": {"shape": [1, 8]}}})
    assert with_short_prompt([{"seq": 1}], fixed, seq) == [{"seq": 1}]  # no dynamic token dim: nothing added


def test_export_point_never_uses_size_one_for_a_dim_that_may_grow() -> None:
    inputs = pytest.importorskip("deployc.graph.inputs")  # imports torch
    assert inputs.export_point([DimPlan(name="b", min=1, max=2)]) == {"b": 2}
    assert inputs.export_point([DimPlan(name="b", min=1, max=9)]) == {"b": 5}
    assert inputs.export_point([DimPlan(name="b", min=1, max=1)]) == {"b": 1}


# ---- declared outputs ----------------------------------------------------------------------------------

def test_declared_outputs_against_the_program() -> None:
    declared = [OutputPlan(name="emb", shape=[1, 32], dtype="float32")]
    actual = [TensorFacts(name="output_0", dtype="float32", shape=[1, 32])]
    assert compare_outputs("forward", declared, actual, set()) is None
    assert compare_outputs("forward", [], actual, set()) is None
    wrong = [TensorFacts(name="output_0", dtype="float32", shape=[1, 64])]
    assert compare_outputs("forward", declared, wrong, set()) == (
        "output emb: declared float32[1, 32], the model returns float32[1, 64]")
    assert compare_outputs("encode", declared, actual + actual, set()) == (
        "method encode returns 2 output(s); the manifest declares 1")
    dynamic = [OutputPlan(name="h", shape=[1, "seq"], dtype="float32")]
    varying = [TensorFacts(name="output_0", dtype="float32", shape=[1, SizeRange(min=2, max=9)])]
    assert compare_outputs("forward", dynamic, varying, {"seq"}) is None
    assert compare_outputs("forward", dynamic, varying, set()) == "output h: dim 'seq' is not one of the model's dims"


def test_index_rate_read_from_the_embed_workers_last_line() -> None:
    from deployc.packaging.assets import _rate

    assert _rate("loading\nembedded 2000 in 4.000000\n") == "500 chunks/s"
    assert _rate("embedded 42 in 0.0\n") == ""  # a clock that did not move says nothing rather than infinity
    assert _rate("# LIBNATIVE\n") == "" and _rate("") == ""


def test_index_progress_lines() -> None:
    from deployc.packaging.assets import progress_line

    assert progress_line("progress 40 200\n") == "40/200 chunks (20%)"
    assert progress_line("# LIBNATIVE: something\n") == "" and progress_line("progress x 2") == ""


def test_index_rates_keep_two_digits_when_slow() -> None:
    """An NPU program on the HTP emulator embeds under one chunk a second: said as 0.71, not 0."""
    from deployc.packaging.assets import _rate, progress_line

    assert _rate("embedded 42 in 59.1") == "0.71 chunks/s"
    assert _rate("embedded 42 in 0.45", "images") == "93 images/s"
    assert _rate("embedded 3000 in 1.2") == "2,500 chunks/s"
    assert _rate("something else") == ""
    assert progress_line("progress 40 200") == "40/200 chunks (20%)"
