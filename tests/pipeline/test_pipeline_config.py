"""The pipeline package called directly on the demo manifest (no CLI, no torch): the registry's ops, the
order stages run in, and the runtime config's pipeline section a bundle ships."""

from __future__ import annotations

from helpers.projects import REPO

from deployc.load.project import load_project
from deployc.pipeline.config import pipeline_config
from deployc.pipeline.graph import order, references
from deployc.pipeline.ops import OPS, op_of


def test_every_op_is_registered_under_the_name_its_schema_takes() -> None:
    assert sorted(OPS) == ["audio", "generate", "image", "model", "similarity", "template", "tokenize",
                           "vector_search"]
    for name, op in OPS.items():
        assert op.name == name and op.schema.model_fields["op"].annotation.__args__ == (name,)


def test_the_demo_s_stages_run_after_what_they_read_and_configure_as_the_bundle_ships_them() -> None:
    project = load_project(REPO / "manifests" / "rag_offline.yaml")
    pipeline = project.manifest.pipeline
    assert pipeline is not None
    ran: set[str] = set(pipeline.inputs)
    for stage in order(pipeline):
        assert {ref.split(".")[0] for ref in references(stage).values()} <= ran, stage.name
        ran.add(stage.name)
    config = pipeline_config(project.manifest, project.folder, {"embedder": 128})
    assert config is not None
    assert config.inputs == ["query"] and config.input_types == ["text"]
    by_name = {s.name: s for s in config.stages}
    assert [s.op for s in config.stages] == [op_of(s).name for s in order(pipeline)]
    assert [s.name for s in config.stages] == ["query_tokens", "query_embedding", "retrieve", "prompt", "answer"]
    assert (by_name["query_embedding"].program, by_name["answer"].program) == ("embedder", "llm")
    assert by_name["retrieve"].inputs == ["query=query_embedding.embedding"]
    assert by_name["answer"].outputs == ["text", "tokens"]
    assert all(s.program == "" for s in config.stages if s.op not in ("model", "generate"))
