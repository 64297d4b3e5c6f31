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


class Retrieval(Frozen):
    """pipeline.indexes.<name>.queries: what the device retrieves against what eager fp32 does."""

    file: str
    queries: int
    topk: int
    topk_overlap: float  # mean share of a query's eager top-k chunks the device also retrieves in its top-k
    mean_rank_change: float  # mean |rank moved| of eager's top-k chunks in the device's ranking
    min_topk_overlap: float

    @property
    def missed(self) -> list[str]:
        if self.topk_overlap < self.min_topk_overlap:
            return [f"top-{self.topk} retrieval overlap with eager fp32 on {self.file} {self.topk_overlap:.1%} < "
                    f"{self.min_topk_overlap:.0%} (mean rank change {self.mean_rank_change:.2f}, "
                    f"{self.queries} queries)"]
        return []


def retrieval(eager_queries: Any, eager_corpus: Any, device_queries: Any, device_corpus: Any, topk: int,
              min_topk_overlap: float, file: str) -> Retrieval:
    """Each query's chunks ranked by cosine twice: eager fp32's query against eager fp32's corpus vectors, and
    the target's program's query against the index's vectors (what a device searches)."""
    import numpy as np

    def unit(m: Any) -> Any:
        m = np.asarray(m, dtype=np.float64)
        return m / np.maximum(np.linalg.norm(m, axis=1, keepdims=True), 1e-12)

    if not np.all(np.isfinite(np.asarray(device_queries, dtype=np.float64))):
        raise ValueError(f"the target's program's query vectors for {file} are not finite")
    want = np.argsort(-(unit(eager_queries) @ unit(eager_corpus).T), axis=1, kind="stable")
    got = np.argsort(-(unit(device_queries) @ unit(device_corpus).T), axis=1, kind="stable")
    n, count = want.shape
    k = max(1, min(topk, count))
    overlap = moved = 0.0
    for i in range(n):
        overlap += len(set(want[i, :k].tolist()) & set(got[i, :k].tolist())) / k
        position = {int(j): rank for rank, j in enumerate(got[i])}
        moved += float(np.mean([abs(position[int(j)] - rank) for rank, j in enumerate(want[i, :k])]))
    return Retrieval(file=file, queries=n, topk=k, topk_overlap=overlap / n, mean_rank_change=moved / n,
                     min_topk_overlap=min_topk_overlap)
