"""How well the offline RAG demo answers, measured: for every question of rag_questions.json, whether the
passage that answers it is retrieved first, and whether the answer contains that passage's key term;
for the LLM in eager fp32 PyTorch (with the bundle's own retrieval) and for each built bundle's program
(arduino_q: the `gguf` XNNPACK program on its CPU; snapdragon: the 16a8w static program on the NPU, run on
QNN's HTP emulator here: about 8 s a call, so 1-7 minutes an answer and about an hour for the 12), with the
seconds each answer took.

    .venv/bin/python benchmarks/rag_answers.py [DIST]   # DIST: dist/rag-offline/1.0.0 (`make demo` builds it)

tests/e2e/test_rag.py holds the counts to a floor on every run; README.md reports them.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
QUESTIONS = Path(__file__).with_name("rag_questions.json")
MANIFEST = REPO / "manifests" / "rag_offline.yaml"


def questions() -> list[dict[str, str]]:
    return list(json.loads(QUESTIONS.read_text())["questions"])


def score(bundle: Any, asked: list[dict[str, str]]) -> list[dict[str, Any]]:
    """Per question: what was retrieved first, the answer, and whether each is right."""
    rows = []
    for q in asked:
        start = time.perf_counter()
        outputs = bundle.run({"query": q["question"]})["outputs"]
        first = outputs["sources"][0]["source"]
        answer = str(outputs["answer"])
        rows.append({"question": q["question"], "retrieved": first, "source_ok": first == q["source"],
                     "answer": answer, "key_ok": q["key"].lower() in answer.lower(),
                     "seconds": round(time.perf_counter() - start, 1)})
    return rows


def eager_bundle(folder: Path, manifest: Path = MANIFEST, model: str = "llm") -> Any:
    """The bundle with its decoder program replaced by the eager fp32 model the build started from."""
    import numpy as np
    import torch

    from deployc.graph.model import load_model
    from deployc.load.project import load_project
    from deployc.plan.planner import make_plan
    from deployc.plan.toolchain import detect
    from deployc.runtime.pipeline_runner import Bundle

    unit = next(u for u in make_plan(load_project(manifest), detect()).units() if u.model == model)
    eager = load_model(unit.load, manifest.parent).eval()

    class EagerDecoder(Bundle):
        eager_model = eager

        def call(self, program: str, tensors: list[np.ndarray], method: str = "forward") -> list[np.ndarray]:
            if program != model:
                return super().call(program, tensors, method)
            with torch.no_grad():
                return [self.eager_model(*(torch.from_numpy(t) for t in tensors)).numpy()]

    return EagerDecoder(folder)


def variants(dist: Path, manifest: Path = MANIFEST, targets: tuple[str, ...] = ("arduino_q", "snapdragon")
             ) -> dict[str, Any]:
    """The eager decoder, and each target's bundle named by where its decoder runs."""
    from deployc.runtime.pipeline_runner import Bundle

    out: dict[str, Any] = {"fp32 eager (arduino_q retrieval)": eager_bundle(dist / "arduino_q", manifest)}
    for target in targets:
        bundle = Bundle(dist / target)
        llm, embedder = bundle.programs["llm"], bundle.programs["embedder"]
        out[f"{llm['quantization']} {target} {llm['unit']} ({embedder['unit']} retrieval)"] = bundle
    return out


def main() -> None:
    dist = Path(sys.argv[1]) if len(sys.argv) > 1 else REPO / "dist" / "rag-offline" / "1.0.0"
    asked = questions()
    for name, bundle in variants(dist).items():
        rows = score(bundle, asked)
        print(f"{name}: right passage first {sum(r['source_ok'] for r in rows)}/{len(rows)}, "
              f"key term in the answer {sum(r['key_ok'] for r in rows)}/{len(rows)}")
        for r in rows:
            print(f"  {'+' if r['key_ok'] else '-'} {r['question']}  ->  {r['answer'].strip()}  [{r['seconds']} s]")


if __name__ == "__main__":
    main()
