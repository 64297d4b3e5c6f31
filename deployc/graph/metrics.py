"""Agreement between a program's outputs and eager PyTorch's: max abs error, cosine, SQNR; for a decoder
on held-out text, perplexity, KL divergence and top-1 agreement of its next-token distributions; on a
task's samples, a classifier's top-1 agreement or an embedder's nearest-neighbour overlap. Pure."""

from __future__ import annotations

import math
from typing import Any

from deployc.core.facts import TOP1_MARGIN, Metrics, PointMetrics, Summary, TaskMetrics, TextMetrics

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
    agree = clear = 0
    for ref, got, target in positions:
        lr, lg = log_softmax(ref), log_softmax(got)
        if not np.all(np.isfinite(lg)):
            raise ValueError("the program's logits are not finite on the held-out text")
        nll -= float(lg[target])
        ref_nll -= float(lr[target])
        kl += float(np.sum(np.exp(lr) * (lr - lg)))
        second = float(np.partition(lr, -2)[-2]) if lr.size > 1 else -math.inf  # a tie: the best's own value
        if float(np.max(lr)) - second >= TOP1_MARGIN:
            clear += 1
            agree += int(np.argmax(lr) == np.argmax(lg))
    n = max(len(positions), 1)
    return TextMetrics(file=file, positions=len(positions), perplexity=math.exp(nll / n),
                       reference_perplexity=math.exp(ref_nll / n), kl=max(kl / n, 0.0),
                       top1=agree / clear if clear else 1.0, top1_positions=clear)


def judge_text(text: TextMetrics, max_perplexity_ratio: float, max_kl: float, min_top1: float) -> list[str]:
    missed = []
    if text.perplexity_ratio > max_perplexity_ratio:
        missed.append(f"perplexity {text.perplexity:.3f} is {text.perplexity_ratio:.4f}x eager fp32's "
                      f"{text.reference_perplexity:.3f} > {max_perplexity_ratio}x")
    if text.kl > max_kl:
        missed.append(f"KL {text.kl:.4g} > {max_kl}")
    if text.top1 < min_top1:
        missed.append(f"top-1 agreement {text.top1:.1%} < {min_top1:.0%} (on the {text.top1_positions} of "
                      f"{text.positions} positions where eager's first choice is clear)")
    return missed


def judge_self_test_text(text: TextMetrics, max_kl: float, min_top1: float) -> list[str]:
    """The self-test's few positions (a device checking it computes what the build verified): KL and top-1.
    Perplexity over n positions is the mean of n sampled targets' log-ratios; KL is that quantity's expectation
    under eager's distribution, without the sampling. SmolLM2-135M on the NPU, its 8 shipped positions:
    perplexity 1.081x eager's with KL 0.009 and every clear top-1 agreeing (the whole text: 1.005x, KL 0.015).
    The whole held-out text is judged on all three at build."""
    return judge_text(text, math.inf, max_kl, min_top1)


def task_metrics(file: str, measure: str, k: int, refs: list[Any], outs: list[Any]) -> TaskMetrics:
    """refs / outs: per sample, eager's and the program's first output. top1: argmax agreement over the
    last axis (every row of it); topk: each sample's k nearest other samples by cosine, eager's and the
    program's, compared as sets (overlap) and by how far eager's neighbours moved in the program's ranking."""
    import numpy as np

    if measure == "top1":
        pairs = [(np.asarray(r, dtype=np.float64), np.asarray(o, dtype=np.float64)) for r, o in zip(refs, outs)]
        agree = [float(np.mean(np.argmax(r.reshape(-1, r.shape[-1]), -1) == np.argmax(o.reshape(-1, o.shape[-1]), -1)))
                 for r, o in pairs]
        return TaskMetrics(file=file, samples=len(refs), measure="top1", top1=float(np.mean(agree)))

    def ranked(vectors: list[Any]) -> Any:
        m = np.stack([np.asarray(v, dtype=np.float64).ravel() for v in vectors])
        m /= np.maximum(np.linalg.norm(m, axis=1, keepdims=True), 1e-12)
        scores = m @ m.T
        np.fill_diagonal(scores, -np.inf)  # a sample is not its own neighbour
        return np.argsort(-scores, axis=1, kind="stable")[:, :-1]

    if not all(np.all(np.isfinite(np.asarray(o, dtype=np.float64))) for o in outs):
        raise ValueError("the program's embeddings are not finite on the task samples")
    n = len(refs)
    k = min(k, n - 1)
    eager, program = ranked(refs), ranked(outs)
    overlap = moved = 0.0
    for i in range(n):
        want = eager[i, :k]
        overlap += len(set(want.tolist()) & set(program[i, :k].tolist())) / k
        position = {int(j): rank for rank, j in enumerate(program[i])}
        moved += float(np.mean([abs(position[int(j)] - rank) for rank, j in enumerate(want)]))
    return TaskMetrics(file=file, samples=n, measure="topk", k=k, topk_overlap=overlap / n, mean_rank_change=moved / n)


def judge_task(task: TaskMetrics, min_top1: float | None, min_topk_overlap: float | None) -> list[str]:
    missed = []
    if task.top1 is not None and min_top1 is not None and task.top1 < min_top1:
        missed.append(f"top-1 agreement with eager on {task.file} {task.top1:.1%} < {min_top1:.0%}")
    if task.topk_overlap is not None and min_topk_overlap is not None and task.topk_overlap < min_topk_overlap:
        missed.append(f"top-{task.k} neighbour overlap with eager on {task.file} {task.topk_overlap:.1%} < "
                      f"{min_topk_overlap:.0%} (mean rank change {task.mean_rank_change:.2f})")
    return missed
