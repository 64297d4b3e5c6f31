"""Agreement between a program's outputs and eager PyTorch's: max abs error, cosine, SQNR; for a decoder
on held-out text, perplexity, KL divergence and top-1 agreement of its next-token distributions. Pure."""

from __future__ import annotations

import math
from typing import Any

from deployc.build.facts import Metrics, PointMetrics, Summary, TextMetrics

EXACT_SQNR_DB = 300.0  # reported for bit-exact outputs (JSON has no infinity)


def compare(ref: Any, out: Any) -> Metrics:
    import numpy as np  # here, not at the top: the build's driver judges facts without numpy

    if np.shape(ref) != np.shape(out):
        raise ValueError(f"output shape {list(np.shape(out))} differs from eager {list(np.shape(ref))}")
    r = np.asarray(ref, dtype=np.float64).ravel()
    o = np.asarray(out, dtype=np.float64).ravel()
    diff = r - o
    max_abs = float(np.max(np.abs(diff))) if diff.size else 0.0
    nr, no = float(np.linalg.norm(r)), float(np.linalg.norm(o))
    if nr == 0.0 and no == 0.0:
        cosine = 1.0
    elif nr == 0.0 or no == 0.0:
        cosine = 0.0
    else:
        cosine = float(np.dot(r, o) / (nr * no))
    noise = float(np.sum(diff * diff))
    signal = float(np.sum(r * r))
    if noise == 0.0:
        sqnr = EXACT_SQNR_DB
    elif signal == 0.0:
        sqnr = -EXACT_SQNR_DB
    else:
        sqnr = max(-EXACT_SQNR_DB, min(EXACT_SQNR_DB, 10.0 * math.log10(signal / noise)))
    if not math.isfinite(max_abs):
        max_abs = float(np.finfo(np.float64).max)
    return Metrics(max_abs=max_abs, cosine=min(cosine, 1.0) if math.isfinite(cosine) else -1.0, sqnr_db=sqnr)


def summarize(points: list[PointMetrics]) -> Summary:
    """The worst value of each metric over every output at every point."""
    outs = [o for p in points for o in p.outputs]
    return Summary(max_abs=max(o.max_abs for o in outs), min_cosine=min(o.cosine for o in outs),
                   min_sqnr_db=min(o.sqnr_db for o in outs))


def judge(summary: Summary, min_cosine: float, min_sqnr_db: float, max_abs: float | None) -> list[str]:
    """The tolerances missed, as readable phrases; empty when all hold."""
    missed = []
    if summary.min_cosine < min_cosine:
        missed.append(f"cosine {summary.min_cosine:.6f} < {min_cosine}")
    if summary.min_sqnr_db < min_sqnr_db:
        missed.append(f"SQNR {summary.min_sqnr_db:.2f} dB < {min_sqnr_db} dB")
    if max_abs is not None and summary.max_abs > max_abs:
        missed.append(f"max abs error {summary.max_abs:.3g} > {max_abs}")
    return missed


def text_metrics(file: str, positions: list[tuple[Any, Any, int]]) -> TextMetrics:
    """positions: (eager logits, program logits, the token that came next in the text), one per call."""
    import numpy as np

    def log_softmax(x: Any) -> Any:
        x = np.asarray(x, dtype=np.float64).ravel()
        shifted = x - np.max(x)
        return shifted - np.log(np.sum(np.exp(shifted)))

    nll = ref_nll = kl = 0.0
    agree = 0
    for ref, got, target in positions:
        lr, lg = log_softmax(ref), log_softmax(got)
        if not np.all(np.isfinite(lg)):
            raise ValueError("the program's logits are not finite on the held-out text")
        nll -= float(lg[target])
        ref_nll -= float(lr[target])
        kl += float(np.sum(np.exp(lr) * (lr - lg)))
        agree += int(np.argmax(lr) == np.argmax(lg))
    n = max(len(positions), 1)
    return TextMetrics(file=file, positions=len(positions), perplexity=math.exp(nll / n),
                       reference_perplexity=math.exp(ref_nll / n), kl=max(kl / n, 0.0), top1=agree / n)


def judge_text(text: TextMetrics, max_perplexity_ratio: float, max_kl: float, min_top1: float) -> list[str]:
    missed = []
    if text.perplexity_ratio > max_perplexity_ratio:
        missed.append(f"perplexity {text.perplexity:.3f} is {text.perplexity_ratio:.4f}x eager fp32's "
                      f"{text.reference_perplexity:.3f} > {max_perplexity_ratio}x")
    if text.kl > max_kl:
        missed.append(f"KL {text.kl:.4g} > {max_kl}")
    if text.top1 < min_top1:
        missed.append(f"top-1 agreement {text.top1:.1%} < {min_top1:.0%}")
    return missed
