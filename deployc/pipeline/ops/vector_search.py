"""`vector_search`: the top-k chunks of one of the pipeline's indexes closest (cosine) to a query embedding."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import Field

from deployc.core.errors import RunError
from deployc.core.layout import index_file
from deployc.pipeline.ops.base import Checks, ConfigContext, Host, OpBase, StageBase
from deployc.pipeline.ops.template import as_text
from deployc.pipeline.ports import CHUNKS, TEXT, Port

if TYPE_CHECKING:
    from deployc.pipeline.manifest_view import ManifestView


class VectorSearchStage(StageBase):
    op: Literal["vector_search"]
    index: str
    query: str
    top_k: Annotated[int, Field(ge=1, le=1000)] = 3


class VectorSearchOp(OpBase):
    name = "vector_search"
    schema = VectorSearchStage
    reads = ("query",)
    wiring = frozenset({"index"})

    def outputs(self, stage: VectorSearchStage, manifest: ManifestView, folder: Path | None) -> dict[str, Port]:
        return {"chunks": CHUNKS, "text": TEXT, "scores": Port("tensor", "float32", (stage.top_k,))}

    def check(self, stage: VectorSearchStage, c: Checks) -> None:
        got = c.port(stage, "query", stage.query)
        if not c.known(stage, "index", "index", stage.index, c.pipeline.indexes):
            return
        index = c.pipeline.indexes[stage.index]
        spec = c.manifest.models.get(index.model)
        if spec and spec.outputs and got is not None:
            emb = next(iter(spec.outputs.values()))
            # dims compared below, with the index named
            c.expect(stage, "query", got, Port("tensor", emb.dtype, tuple(str(d) for d in emb.shape)))
            if got.kind == "tensor" and got.shape and emb.shape and got.shape[-1] != emb.shape[-1]:
                c.error(stage, "query", f"the query has dimension {got.shape[-1]} but index '{stage.index}' holds "
                        f"{emb.shape[-1]}-dimensional vectors from model '{index.model}'")

    def params(self, stage: VectorSearchStage, context: ConfigContext) -> dict[str, Any]:
        return {**super().params(stage, context), "index": index_file(stage.index)}

    def run(self, stage: dict[str, Any], args: dict[str, Any], params: dict[str, Any], host: Host) -> dict[str, Any]:
        import numpy as np

        meta, vectors = host.index(params["index"])
        q = np.asarray(args["query"], dtype=np.float64).reshape(-1)
        if q.shape[0] != meta["dim"]:
            raise RunError(f"query has dimension {q.shape[0]}, index {meta['name']} holds {meta['dim']}")
        rows = vectors.astype(np.float64)  # float64 sums, as the native runner: near ties order alike
        scores = rows @ q / (np.linalg.norm(rows, axis=1) * np.linalg.norm(q) + 1e-12)
        top = np.argsort(-scores, kind="stable")[: params["top_k"]]
        chunks = [{**meta["chunks"][i], "score": round(float(scores[i]), 6)} for i in top]
        return {"chunks": chunks, "text": as_text(chunks), "scores": scores[top].astype(np.float32)}


OP = VectorSearchOp()
