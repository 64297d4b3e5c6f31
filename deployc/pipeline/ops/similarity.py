"""`similarity`: cosine or dot product of one embedding `a` [1, D] against every row of `b` [N, D]."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import Field

from deployc.pipeline.ops.base import Checks, Host, OpBase, StageBase
from deployc.pipeline.ports import Port

if TYPE_CHECKING:
    from deployc.pipeline.manifest_view import ManifestView


class SimilarityStage(StageBase):
    """Cosine or dot product of one embedding `a` [1, D] against every row of `b` [N, D]."""

    op: Literal["similarity"]
    a: str
    b: str
    metric: Literal["cosine", "dot"] = "cosine"
    top_k: Annotated[int, Field(ge=1, le=1000)] = 1


class SimilarityOp(OpBase):
    name = "similarity"
    schema = SimilarityStage
    reads = ("a", "b")

    def outputs(self, stage: SimilarityStage, manifest: ManifestView, folder: Path | None) -> dict[str, Port]:
        return {"scores": Port("tensor", "float32", ("candidates",)), "top": Port("tensor", "int64", (stage.top_k,))}

    def check(self, stage: SimilarityStage, c: Checks) -> None:
        got = {f: c.port(stage, f, getattr(stage, f)) for f in ("a", "b")}
        for f, port in got.items():
            if port is not None and (port.kind != "tensor" or port.dtype != "float32" or len(port.shape) != 2):
                c.error(stage, f, f"type mismatch: gets {port}, expects an embedding: tensor float32[rows, dim]")
        a, b = got["a"], got["b"]
        if a is not None and b is not None and a.kind == b.kind == "tensor" and a.shape and b.shape and \
                isinstance(a.shape[-1], int) and isinstance(b.shape[-1], int) and a.shape[-1] != b.shape[-1]:
            c.error(stage, "b", f"{a.shape[-1]}-dimensional `a` against {b.shape[-1]}-dimensional `b`")

    def run(self, stage: dict[str, Any], args: dict[str, Any], params: dict[str, Any], host: Host) -> dict[str, Any]:
        return similarity(args["a"], args["b"], params["metric"], params["top_k"])


def similarity(a: Any, b: Any, metric: str, top_k: int) -> dict[str, Any]:
    """Scores of the one embedding `a` against every row of `b` (float64 sums, as the native runner),
    and the rows' indices best first (the first on ties)."""
    import numpy as np

    q = np.asarray(a, dtype=np.float64).reshape(-1)
    rows = np.asarray(b, dtype=np.float64).reshape(-1, q.shape[0]) if q.size else np.zeros((0, 0))
    scores = rows @ q
    if metric == "cosine":
        scores = scores / (np.linalg.norm(rows, axis=1) * np.linalg.norm(q) + 1e-12)
    top = np.argsort(-scores, kind="stable")[:top_k]
    return {"scores": scores.astype(np.float32), "top": top.astype(np.int64)}


OP = SimilarityOp()
