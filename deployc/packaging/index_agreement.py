"""Whether an index embedded by a host reference program serves the target's queries as one embedded by
the target's own program would (`embed_with: reference`), measured on a sample of chunks that both embed.

Each sampled chunk, embedded by the target's program, is a query (what a device computes); it is scored
against the other sampled chunks twice: their reference vectors (the substituted index) and their
target vectors (the index the target would have built). The top-k of both rankings are compared, and the
scores themselves. Numpy only: the build's driver runs it.
"""

from __future__ import annotations

from typing import Any

from deployc.core.records import Frozen


class Agreement(Frozen):
    sample: int  # chunks embedded by both programs
    topk: int  # neighbours compared per query (at most sample - 1)
    topk_overlap: float  # mean share of a query's top-k found with both vector sets
    max_score_diff: float  # largest |cosine against a chunk's reference vector - against its target vector|
    mean_score_diff: float
    min_topk_overlap: float  # the tolerances it was judged by
    max_score_diff_allowed: float

    @property
    def missed(self) -> list[str]:
        out = []
        if self.topk_overlap < self.min_topk_overlap:
            out.append(f"top-{self.topk} overlap {self.topk_overlap:.1%} < {self.min_topk_overlap:.0%}")
        if self.max_score_diff > self.max_score_diff_allowed:
            out.append(f"score difference {self.max_score_diff:.4f} > {self.max_score_diff_allowed}")
        return out


def sample_rows(count: int, sample: int) -> list[int]:
    """`sample` rows spread evenly over `count` (all of them when there are fewer): the corpus's files
    are in path order, so an even spread takes chunks from across it."""
    if count <= sample:
        return list(range(count))
    return [i * count // sample for i in range(sample)]


def measure(reference: Any, target: Any, topk: int, min_topk_overlap: float, max_score_diff: float) -> Agreement:
    """reference, target: the sampled chunks' vectors, row for row, from the two programs."""
    import numpy as np

    def unit(m: Any) -> Any:
        m = np.asarray(m, dtype=np.float64)
        return m / np.maximum(np.linalg.norm(m, axis=1, keepdims=True), 1e-12)

    ref, tgt = unit(reference), unit(target)
    n = ref.shape[0]
    k = max(1, min(topk, n - 1))
    overlap, worst, total, pairs = 0.0, 0.0, 0.0, 0
    for i in range(n):
        others = np.array([j for j in range(n) if j != i])
        against_ref, against_tgt = ref[others] @ tgt[i], tgt[others] @ tgt[i]
        top_ref = set(others[np.argsort(-against_ref, kind="stable")[:k]].tolist())
        top_tgt = set(others[np.argsort(-against_tgt, kind="stable")[:k]].tolist())
        overlap += len(top_ref & top_tgt) / k
        diff = np.abs(against_ref - against_tgt)
        worst, total, pairs = max(worst, float(diff.max())), total + float(diff.sum()), pairs + diff.size
    return Agreement(sample=n, topk=k, topk_overlap=overlap / n, max_score_diff=worst,
                     mean_score_diff=total / max(pairs, 1), min_topk_overlap=min_topk_overlap,
                     max_score_diff_allowed=max_score_diff)
