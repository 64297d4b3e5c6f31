"""The held-out text a text-generation program is judged on, tokenized when the plan is made.

Its ids become calls of the verification (the program is fed the text one token a call, as it decodes,
and its logits at every position are compared with eager fp32's), so the plan carries them: the text's
and the tokenizer's content decide the program's key, and the worker needs no tokenizer. Imports the
`tokenizers` library (or sentencepiece), never torch."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from deployc.load import hf_directory
from deployc.load.project import Project
from deployc.pipeline.asset_sources import tokenizer_file
from deployc.pipeline.ops.generate import GenerateStage
from deployc.plan.build_plan import HeldOutText

DEFAULT_SAMPLE = Path(__file__).with_name("heldout_sample.txt")  # English prose written for deployc
SAMPLE_NAME = "deployc's sample (deployc/plan/heldout_sample.txt)"
WINDOWS = 4  # scored stretches of the text, each fed from position 0
WINDOW = 64  # positions scored per window (fewer when the context is shorter)
PROMPTS = 8  # greedy parity prompts (fewer where a static decoder's verification must fit its budget)
PROMPT = 16  # tokens per prompt (fewer when the context leaves no room for the generated ones)
MAX_CHARS = 1 << 16  # of a long file only the beginning is tokenized; its whole content is hashed


@dataclass(frozen=True)
class ModelTokenizer:
    path: Path | None
    described: str  # where it comes from, or why there is none


def model_tokenizer(project: Project, model: str) -> ModelTokenizer:
    """The tokenizer a decoder's text is written in: its Hugging Face directory's tokenizer.json, else that of
    a pipeline generate stage driving it."""
    spec = project.manifest.models[model]
    if spec.source.huggingface is not None:
        found = hf_directory.tokenizer_file(project.folder / spec.source.huggingface)
        if found is not None:
            return ModelTokenizer(found, f"{spec.source.huggingface}/tokenizer.json")
    if spec.source.gguf is not None:
        found = hf_directory.tokenizer_file(hf_directory.source_model(spec.source, project.folder).folder)
        if found is not None:
            return ModelTokenizer(found, "the GGUF file's tokenizer")
    pipeline = project.manifest.pipeline
    if pipeline is not None:
        for stage in pipeline.stages:
            if isinstance(stage, GenerateStage) and stage.model == model:
                asset = pipeline.tokenizers.get(stage.tokenizer)
                found = tokenizer_file(asset, project.folder) if asset is not None else None
                if found is not None:
                    return ModelTokenizer(found, f"pipeline tokenizer '{stage.tokenizer}'")
    return ModelTokenizer(None, "no tokenizer to write the held-out text in: neither a tokenizer.json in the model's "
                                "directory nor a pipeline generate stage driving it")


def text_ids(text_file: Path, tokenizer: Path) -> list[int]:
    from deployc.pipeline.host.tokenizers import load_tokenizer

    text = text_file.read_text(encoding="utf-8")[:MAX_CHARS]
    return list(load_tokenizer(tokenizer).encode(text, add_special_tokens=False).ids)


def window_length(context: int) -> int:
    return max(1, min(WINDOW, context))


def needed(context: int) -> int:
    """Tokens the text must give: every window and the token after it."""
    return WINDOWS * window_length(context) + 1


def prompt_length(context: int, seq_max: int, generate: int) -> int:
    return max(1, min(PROMPT, seq_max, context - generate))


# Seeded prompts' lengths (cycled over the prompts), clamped to what the seq dim and the KV cache allow: a
# decoder without a tokenizer is judged by greedy parity from these.
SEEDED_PROMPT_LENGTHS = (5, 12)


def seeded_prompt_lengths(seq_min: int, seq_max: int, context: int, generate: int, count: int = PROMPTS
                          ) -> list[int]:
    top = min(seq_max, context - generate)
    if top < seq_min:
        return []
    return [min(max(SEEDED_PROMPT_LENGTHS[i % len(SEEDED_PROMPT_LENGTHS)], seq_min), top)
            for i in range(count)]


def held_out(ids: list[int], bos: int | None, context: int, seq_max: int, generate: int, file: str, sha256: str,
             tokenizer: str, prompts: int = PROMPTS) -> HeldOutText:
    """`ids` has at least needed(context) tokens (the caller says where it has not)."""
    length = window_length(context)
    windows = []
    for w in range(WINDOWS):  # the model's bos first, as generation starts; it predicts the first text token
        start = w * length
        windows.append([bos, *ids[start: start + length]] if bos is not None else ids[start: start + length + 1])
    p = prompt_length(context, seq_max, generate)
    room = max(len(ids) - p, 0)
    chosen = []
    for j in range(prompts):
        start = j * room // prompts
        chosen.append([bos, *ids[start: start + p - 1]] if bos is not None else ids[start: start + p])
    return HeldOutText(file=file, sha256=sha256, tokenizer=tokenizer, windows=windows, prompts=chosen)
