"""What checking a decoder on arm64 kernels under qemu costs, and which of its verification points the check
runs within its budget: the plan shows it before anything is built, because qemu-aarch64 runs a decoder's
NEON kernels at about half a second a prompt token for a 135M-weight model (a 512-token prefill: ~4 minutes).

A call's seconds follow the weights it reads: a fixed part a call (each weight unpacked and read once) and a
part a token. The held-out text's positions (one token a call) are always run: they carry the text figures
the unit is gated on; the points are run smallest first while the estimate fits, and at least the smallest."""

from __future__ import annotations

from dataclasses import dataclass

from deployc.core.self_test_vectors import MIN_TEXT_POSITIONS, TEXT_BYTES

# Measured 2026-12-07 on this project's 2-core host, qemu-aarch64 -cpu cortex-a53, SmolLM2-135M-Instruct in
# the gguf scheme (134.5M weights): 9 one-token calls in 20.3 s with the program's load, a 256-token prefill
# in 154.3 s. Per weight: a call ~1.1 s, a token ~0.58 s.
QEMU_SECONDS_PER_CALL_WEIGHT = 1.1 / 134.5e6
QEMU_SECONDS_PER_TOKEN_WEIGHT = 0.58 / 134.5e6
# Two minutes: a decoder's one-token point, its short prompt (planner.SHORT_PROMPT) and its held-out positions
# fit for a 135M-weight model (SmolLM2: ~26 s); its longer prompts are the same kernels over more rows,
# judged on this host's kernels by verification and on the device by its self-test vectors.
DEFAULT_BUDGET_S = 120.0


@dataclass(frozen=True)
class Arm64Points:
    """The points the check runs, those it leaves out, and the plan's estimate of its seconds."""

    run: list[dict[str, int]]
    left_out: list[dict[str, int]]
    estimate_s: float


def text_positions(vocab: int, available: int) -> int:
    """How many held-out positions the self-test vectors keep (core/self_test_vectors.py's `write`) for a
    decoder of `vocab` logits: each case's tensors (two int64 ids in, the logits out) as base64."""
    case = 2 * _base64(8) + _base64(4 * vocab)
    return min(available, max(MIN_TEXT_POSITIONS, TEXT_BYTES // case))


def _base64(raw: int) -> int:
    return -(-raw // 3) * 4


def call_s(tokens: int, weights: int) -> float:
    """qemu's seconds for one call of `tokens` tokens through a decoder of `weights` weights, by the measured rate."""
    return weights * (QEMU_SECONDS_PER_CALL_WEIGHT + tokens * QEMU_SECONDS_PER_TOKEN_WEIGHT)


def fitting(points: list[dict[str, int]], dim: str, text_positions: int, weights: int, budget_s: float
            ) -> Arm64Points:
    """The verification points (`dim`: the tokens' dim) the check runs within `budget_s`, smallest first."""
    estimate = text_positions * call_s(1, weights)
    run: list[dict[str, int]] = []
    left_out: list[dict[str, int]] = []
    for point in sorted(points, key=lambda p: p.get(dim, 1)):
        seconds = call_s(point.get(dim, 1), weights)
        if run and estimate + seconds > budget_s:
            left_out.append(point)
            continue
        run.append(point)
        estimate += seconds
    return Arm64Points(run=[p for p in points if p in run], left_out=left_out, estimate_s=round(estimate, 1))
