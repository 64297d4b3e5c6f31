"""The pipeline section of the runtime config: stages in execution order, wired by name."""

from __future__ import annotations

import json
from typing import Any

from deployc.graph.pipeline import order, references, stage_outputs
from deployc.manifest import GenerateStage, Manifest, ModelStage, TokenizeStage, VectorSearchStage

_WIRING = {"op", "name", "model", "method", "inputs", "input", "query", "prompt", "tokenizer", "index"}


def _params(stage: Any, m: Manifest) -> dict[str, Any]:
    params = stage.model_dump(mode="json", exclude=_WIRING)
    if isinstance(stage, (TokenizeStage, GenerateStage)):
        params["tokenizer"] = f"assets/tokenizers/{stage.tokenizer}.json"
    if isinstance(stage, VectorSearchStage):
        params["index"] = f"assets/indexes/{stage.index}.json"
    if isinstance(stage, GenerateStage):
        c = m.models[stage.model].constants
        params.update({k: c[k] for k in ("bos_id", "eos_ids", "max_seq_len", "vocab_size") if k in c})
    return params


def pipeline_config(m: Manifest) -> dict[str, Any] | None:
    p = m.pipeline
    if p is None:
        return None
    stages = []
    for s in order(p):
        refs = references(s)
        stages.append({
            "name": s.name, "op": s.op,
            "program": s.model if isinstance(s, (ModelStage, GenerateStage)) else "",
            "method": s.method if isinstance(s, ModelStage) else ("forward" if isinstance(s, GenerateStage) else ""),
            "inputs": [f"{field.split('.')[-1]}={ref}" for field, ref in refs.items()],
            "outputs": list(stage_outputs(s, m)),
            "params_json": json.dumps(_params(s, m), sort_keys=True, separators=(",", ":")),
        })
    return {"inputs": list(p.inputs), "outputs": [f"{k}={v}" for k, v in p.outputs.items()], "stages": stages}
