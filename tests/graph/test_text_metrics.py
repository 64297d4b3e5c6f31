"""The held-out text measures against independent references (torch's cross entropy and KL divergence),
and the self-test vectors' text cases: a prefix of the windows, in order, capped by size."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from deployc.core import self_test_vectors
from deployc.core.facts import TOP1_MARGIN
from deployc.graph.metrics import judge_self_test_text, judge_text, text_metrics


def test_text_metrics_match_torch() -> None:
    import torch
    import torch.nn.functional as F

    g = np.random.default_rng(0)
    ref, got = g.normal(0, 3, (50, 40)), g.normal(0, 3, (50, 40))
    got[:25] = ref[:25] + g.normal(0, 0.1, (25, 40))  # half the positions close, half not
    targets = g.integers(0, 40, 50)
    m = text_metrics("t", [(r, o, int(t)) for r, o, t in zip(ref, got, targets)])
    r, o, t = torch.tensor(ref), torch.tensor(got), torch.tensor(targets)
    assert math.isclose(m.perplexity, math.exp(F.cross_entropy(o, t).item()), rel_tol=1e-9)
    assert math.isclose(m.reference_perplexity, math.exp(F.cross_entropy(r, t).item()), rel_tol=1e-9)
    kl = F.kl_div(F.log_softmax(o, -1), F.log_softmax(r, -1), log_target=True, reduction="batchmean").item()
    assert math.isclose(m.kl, kl, rel_tol=1e-9)
    lead = np.sort(ref, axis=1)[:, -1] - np.sort(ref, axis=1)[:, -2]  # logits and log-probs lead alike
    clear = lead >= TOP1_MARGIN
    assert m.positions == 50 and m.top1_positions == int(clear.sum()) < 50
    assert m.top1 == float(np.mean((ref.argmax(1) == got.argmax(1))[clear]))


def test_top1_counts_only_positions_where_eager_is_clear() -> None:
    """A near-tie in eager flips on any rounding: it is left out of top-1 (and the count says how many
    positions remain); a placeholder whose logits are all near-ties is judged by KL and perplexity alone."""
    tie, clear = np.array([1.0, 1.0 - TOP1_MARGIN / 2, -3.0]), np.array([2.0, 0.0, -3.0])
    m = text_metrics("t", [(tie, tie[[1, 0, 2]], 0), (clear, clear, 0), (clear, clear[[1, 0, 2]], 0)])
    assert (m.top1_positions, m.top1) == (2, 0.5)
    flat = text_metrics("t", [(tie, tie[[1, 0, 2]], 0)] * 3)
    assert (flat.top1_positions, flat.top1) == (0, 1.0)
    assert judge_text(flat, 2.0, 0.01, 0.99) == []


def test_identical_logits_are_a_perfect_score_and_misses_are_named() -> None:
    logits = np.linspace(-2, 2, 16)
    m = text_metrics("t", [(logits, logits, 3)] * 4)
    assert m.kl == 0.0 and m.top1 == 1.0 and m.perplexity == m.reference_perplexity
    assert judge_text(m, 1.001, 0.001, 0.99) == []
    flat = text_metrics("t", [(logits, np.zeros(16), 15)] * 4)
    assert judge_text(flat, 1.001, 0.001, 0.99) == [
        f"perplexity {flat.perplexity:.3f} is {flat.perplexity_ratio:.4f}x eager fp32's "
        f"{flat.reference_perplexity:.3f} > 1.001x", f"KL {flat.kl:.4g} > 0.001",
        "top-1 agreement 0.0% < 99% (on the 4 of 4 positions where eager's first choice is clear)"]


def test_the_self_tests_few_positions_are_judged_on_kl_and_top1_not_on_their_sampled_targets() -> None:
    """Eight positions where the program shifts a little probability off two unlikely targets: perplexity over
    those 8 sampled targets moves past 1.03x while KL (the expectation over eager's distribution) stays small."""
    g = np.random.default_rng(1)
    rows = []
    for i in range(8):
        ref = g.normal(0, 1, 64)
        ref[0] += 6.0  # a clear first choice
        got = ref.copy()
        target = 40 + i
        if i < 2:
            got[target] -= 0.6  # an unlikely target made a little less likely
        rows.append((ref, got, target))
    m = text_metrics("self-test", rows)
    assert m.perplexity_ratio > 1.03 and m.kl < 0.02 and m.top1 == 1.0
    assert judge_text(m, 1.03, 0.02, 0.93)[0].startswith("perplexity")
    assert judge_self_test_text(m, 0.02, 0.93) == []
    assert judge_self_test_text(m, m.kl / 2, 0.93) == [f"KL {m.kl:.4g} > {m.kl / 2}"]


def test_self_test_vectors_keep_a_prefix_of_the_text(tmp_path: Path) -> None:
    row = np.zeros((1, 4096), dtype=np.float32)  # 16 KiB a case: 2 MiB hold ~94 of them
    point = [("forward", {"seq": 2}, [np.zeros((1, 2), dtype=np.int64)], [row])]
    windows = [[("forward", {"seq": 1}, [np.asarray([[w * 100 + i]]), np.asarray([i])], [row], i + 1)
                for i in range(64)] for w in range(4)]
    kept = self_test_vectors.write(tmp_path / "v.json", point, windows)
    cases = json.loads((tmp_path / "v.json").read_text())["cases"]
    assert 80 <= kept <= 100 and len(cases) == 1 + kept and "target" not in cases[0]
    texts = [c for c in cases if "target" in c]
    assert [c["target"] for c in texts[:65]] == [*range(1, 65), 1]  # window 0 whole, then window 1 from its start
    huge = [[("forward", {"seq": 1}, [np.asarray([[i]]), np.asarray([i])], [np.zeros((1, 300_000), np.float32)], 1)
             for i in range(20)]]
    assert self_test_vectors.write(tmp_path / "w.json", point, huge) == self_test_vectors.MIN_TEXT_POSITIONS
