"""Pipeline graph validation at `validate` time: every error located, with its line."""

from __future__ import annotations

from pathlib import Path

import pytest

BASE = """\
apiVersion: deployc/v1
name: rag
version: 1.0.0
targets: [arduino_q]
models:
  embedder:
    task: embedding
    source: {factory: "models.small:text_encoder"}
    inputs:
      tokens: {shape: [1, seq], dtype: int64}
    dims: {seq: {min: 2, max: 64}}
    outputs: {embedding: {shape: [1, 64]}}
  wide:
    task: embedding
    source: {factory: "models.small:text_encoder", kwargs: {dim: 128}}
    inputs:
      tokens: {shape: [1, seq], dtype: int64}
    dims: {seq: {min: 2, max: 64}}
    outputs: {embedding: {shape: [1, 128]}}
  llm:
    task: text-generation
    source: {factory: "models.tiny_llm:build"}
    inputs:
      tokens: {shape: [1, seq], dtype: int64}
      input_pos: {shape: [seq], dtype: int64, fill: arange}
    dims: {seq: {min: 1, max: 128}}
    outputs: {logits: {shape: [1, 30522]}}
    constants: {max_seq_len: 128, eos_ids: [102]}
pipeline:
  inputs: {query: {type: text}}
  outputs: {answer: answer.text}
  tokenizers: {tok: {path: tok.json}}
  indexes:
    docs: {corpus: "corpus/*.md", model: embedder, tokenizer: tok}
  stages:
    - {name: toks, op: tokenize, tokenizer: tok, input: query, max_length: 64}
    - {name: emb, op: model, model: embedder, inputs: {tokens: toks.input_ids}}
    - {name: retrieve, op: vector_search, index: docs, query: emb.embedding, top_k: 2}
    - {name: prompt, op: template, template: "{context} Q: {question}", inputs: {context: retrieve.text, question: query}}
    - {name: answer, op: generate, model: llm, tokenizer: tok, prompt: prompt.text}
"""

CASES = {
    "cycle": (
        [("inputs: {tokens: toks.input_ids}", "inputs: {tokens: answer.tokens}")],
        ["m.yaml:36:14: error: pipeline.stages[0].name: stage 'toks' is never used: no stage or pipeline output "
         "reads it",
         "m.yaml:38:14: error: pipeline.stages[2].name: cycle emb -> answer -> prompt -> retrieve -> emb"],
    ),
    "dangling": (
        [("query: emb.embedding", "query: embb.embedding")],
        ["m.yaml:37:14: error: pipeline.stages[1].name: stage 'emb' is never used: no stage or pipeline output "
         "reads it",
         "m.yaml:38:63: error: pipeline.stages[2].query: no stage named 'embb'",
         "    hint: did you mean 'emb'?"],
    ),
    "unknown-port": (
        [("query: emb.embedding", "query: emb.vector")],
        ["m.yaml:38:63: error: pipeline.stages[2].query: stage 'emb' has no output 'vector'",
         "    hint: its outputs: embedding"],
    ),
    "text-into-tensor": (
        [("query: emb.embedding", "query: query")],
        ["m.yaml:37:14: error: pipeline.stages[1].name: stage 'emb' is never used: no stage or pipeline output "
         "reads it",
         "m.yaml:38:63: error: pipeline.stages[2].query: type mismatch: gets text, expects tensor float32[1, 64]"],
    ),
    "index-dimension": (
        [("model: embedder, inputs", "model: wide, inputs")],
        ["m.yaml:38:63: error: pipeline.stages[2].query: the query has dimension 128 but index 'docs' holds "
         "64-dimensional vectors from model 'embedder'"],
    ),
    "placeholder": (
        [("Q: {question}", "Q: {q}")],
        ["m.yaml:39:46: error: pipeline.stages[3].template: placeholder {q} has no entry under inputs",
         "m.yaml:39:99: error: pipeline.stages[3].inputs.question: the template has no {question} placeholder"],
    ),
    "generate-needs-llm": (
        [("op: generate, model: llm", "op: generate, model: embedder")],
        ["m.yaml:40:43: error: pipeline.stages[4].model: a text-generation model takes exactly the inputs tokens "
         "[1, seq] and input_pos [seq]",
         "m.yaml:40:43: error: pipeline.stages[4].model: model 'embedder' must declare constants.eos_ids",
         "m.yaml:40:43: error: pipeline.stages[4].model: model 'embedder' must declare constants.max_seq_len",
         "m.yaml:40:43: error: pipeline.stages[4].model: model 'embedder' must have task: text-generation"],
    ),
    "tokenizer-missing": (
        [("path: tok.json", "path: missing.json")],
        ["m.yaml:32:21: error: pipeline.tokenizers.tok: tokenizer file not found: missing.json"],
    ),
    "corpus-outside": (
        [('corpus: "corpus/*.md"', 'corpus: "../*.md"')],
        ["m.yaml:34:20: error: pipeline.indexes.docs.corpus: corpus glob '../*.md' must stay inside the "
         "manifest's folder"],
    ),
    "corpus-empty": (
        [('corpus: "corpus/*.md"', 'corpus: "nothing/*.md"')],
        ["m.yaml:34:20: error: pipeline.indexes.docs.corpus: 'nothing/*.md' matches no files"],
    ),
    "queries-missing": (
        [("tokenizer: tok}", "tokenizer: tok, queries: {file: q.txt}}")],
        ["m.yaml:34:84: error: pipeline.indexes.docs.queries.file: q.txt: no such file"],
    ),
    "too-many-tokens": (
        [("max_length: 64}", "max_length: 256}")],
        ["m.yaml:37:64: error: pipeline.stages[1].inputs.tokens: stage 'toks' produces up to 256 tokens, but model "
         "'embedder' input 'tokens' allows seq <= 64"],
    ),
    "unused-stage": (
        [("prompt: prompt.text}", 'prompt: prompt.text}\n    - {name: spare, op: template, template: "x"}')],
        ["m.yaml:41:14: error: pipeline.stages[5].name: stage 'spare' is never used: no stage or pipeline output "
         "reads it"],
    ),
    "unknown-op": (
        [("op: vector_search", "op: vector_serch")],
        ["m.yaml:38:28: error: pipeline.stages[2].op: 'vector_serch' is not one of: model, tokenize, vector_search, "
         "template, generate, image, audio, similarity",
         "    hint: did you mean 'vector_search'?"],
    ),
}


def test_a_query_set_needs_two_queries(project: Path, cli) -> None:
    (project / "corpus").mkdir()
    (project / "corpus" / "a.md").write_text("hello world\n")
    (project / "tok.json").write_text("{}")
    (project / "q.txt").write_text("only one\n\n")
    (project / "m.yaml").write_text(BASE.replace("tokenizer: tok}", "tokenizer: tok, queries: {file: q.txt}}", 1))
    r = cli("validate", "m.yaml")
    assert r.code == 2 and r.err.splitlines() == [
        "m.yaml:34:84: error: pipeline.indexes.docs.queries.file: q.txt: 1 query line(s); give at least 2, one a line"]


@pytest.mark.parametrize("case", sorted(CASES))
def test_pipeline_errors(case: str, project: Path, cli) -> None:
    (project / "corpus").mkdir()
    (project / "corpus" / "a.md").write_text("hello world\n")
    (project / "tok.json").write_text("{}")
    text = BASE
    for old, new in CASES[case][0]:
        assert old in text
        text = text.replace(old, new, 1)
    (project / "m.yaml").write_text(text)
    r = cli("validate", "m.yaml")
    assert r.code == 2
    assert r.err.splitlines() == CASES[case][1]


def test_valid_pipeline(project: Path, cli) -> None:
    (project / "corpus").mkdir()
    (project / "corpus" / "a.md").write_text("hello world\n")
    (project / "tok.json").write_text("{}")
    (project / "m.yaml").write_text(BASE)
    r = cli("validate", "m.yaml")
    assert r.code == 0, r.err


def test_corpus_symlink_refused(project: Path, cli, tmp_path_factory) -> None:
    outside = tmp_path_factory.mktemp("outside") / "secret.md"
    outside.write_text("secret")
    (project / "corpus").mkdir()
    (project / "corpus" / "a.md").write_text("hello world\n")
    (project / "corpus" / "link.md").symlink_to(outside)
    (project / "tok.json").write_text("{}")
    (project / "m.yaml").write_text(BASE)
    r = cli("validate", "m.yaml")
    assert r.code == 2
    assert r.err.splitlines() == ["m.yaml:34:20: error: pipeline.indexes.docs.corpus: corpus/link.md is a symlink or "
                                  "lies outside the manifest's folder"]
