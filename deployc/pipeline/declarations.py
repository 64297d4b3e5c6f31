"""What a pipeline declares besides its stages: its inputs, and the assets stages share (tokenizers, vector
indexes). Records of the manifest's `pipeline:` section that ops, asset sources and the plan read."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from deployc.core.records import Frozen, GgufRef


class PipelineInput(Frozen):
    type: Literal["text", "image", "audio"] = Field(
        default="text", description="text: a string; image: a PNG or JPEG file; audio: a WAV file (given as a path)")


class TokenizerAsset(Frozen):
    """A Hugging Face tokenizer.json or a SentencePiece .model: a file next to the manifest, or a file
    inside an installed package (found without importing the package)."""

    path: str | None = Field(default=None, description="relative to the manifest's folder")
    package: str | None = Field(default=None, description="installed Python package that ships the file")
    file: str | None = Field(default=None, description="path of the file inside `package`")
    huggingface: str | None = Field(default=None, description="a Hugging Face model directory holding "
                                                              "tokenizer.json, relative to the manifest")
    gguf: GgufRef | None = Field(default=None, description="a GGUF file whose vocabulary, merges and special "
                                                           "tokens make the tokenizer: a path relative to the "
                                                           "manifest, or {package, file}")

    def is_sentencepiece(self) -> bool:
        """A SentencePiece model file (`.model`) rather than a tokenizer.json."""
        return (self.path or self.file or "").endswith(".model")


class Chunking(Frozen):
    words: Annotated[int, Field(ge=8, le=2000)] = 80
    overlap: Annotated[int, Field(ge=0)] = 20


class IndexAgreement(Frozen):
    """How an index embedded by a host reference program is proven to serve the target's queries: the
    target's program embeds `sample` chunks; each, as a query, must rank the sample the same way against
    the reference's vectors as against the target's own."""

    sample: Annotated[int, Field(ge=2, le=10_000)] = Field(default=32, description="chunks the target embeds too")
    topk: Annotated[int, Field(ge=1, le=100)] = Field(default=3, description="neighbours compared per query")
    min_topk_overlap: Annotated[float, Field(ge=0.0, le=1.0)] = Field(
        default=0.9, description="mean share of each query's top-k found with both vector sets, at least")
    max_score_diff: Annotated[float, Field(ge=0.0, le=2.0)] = Field(
        default=0.05, description="largest difference of a query's cosine score against the two vectors of a chunk")


class IndexQueries(Frozen):
    """A query set judged against the index as the device will serve it: each query's top-k chunks by the
    target's program (its query vector against the bundle's index vectors) against eager fp32's (eager
    query and eager corpus vectors)."""

    file: str = Field(description="UTF-8 text file of queries, one per line (blank lines skipped), relative to "
                                  "the manifest's folder")
    topk: Annotated[int, Field(ge=1, le=100)] = Field(default=3, description="chunks compared per query")
    min_topk_overlap: Annotated[float, Field(ge=0.0, le=1.0)] = Field(
        default=0.9, description="mean share of each query's top-k chunks that eager fp32 retrieves too, at least")


class IndexAsset(Frozen):
    corpus: str = Field(description="glob of UTF-8 text files (or of PNG/JPEG images, with `image`), relative "
                                    "to the manifest's folder")
    model: str = Field(description="the embedding model that embeds every chunk (its built program is used)")
    tokenizer: str | None = Field(default=None, description="tokenizer asset that prepares text chunks for `model`")
    image: str | None = Field(default=None, description="an image index: the pipeline's image stage whose "
                              "preprocessing prepares every corpus image for `model` (one entry per image)")
    chunking: Chunking = Field(default_factory=Chunking)
    embed_with: Literal["target", "reference"] = Field(
        default="target", description="target: every chunk embedded by the target's own program; reference: by "
        "a fast host program of the same model (XNNPACK fp32), the substitution proven on a sample of chunks "
        "that the target's program embeds too (`agreement`)")
    agreement: IndexAgreement = Field(default_factory=lambda: IndexAgreement(),
                                      description="embed_with: reference: the sample and the tolerances")
    queries: IndexQueries | None = Field(default=None, description="retrieval agreement with eager fp32 on a "
                                         "query set (a text corpus only); the bundle is not written below it")
