"""Damaged files: every kind of file deployc reads from a user or from disk, cut at several points and with
bits flipped at seeded offsets. Every case must end in exit 0 (the damage did not matter and the result is
still right), 1 (a checked mismatch) or 2 (a located input error): never a traceback, 3, 130, a hang (each case
is bounded in time) or a half-written output. docs/reliability.md lists the campaign and its counts; manifests
and profiles have their own mutation campaign (test_fuzz.py)."""

from __future__ import annotations

import json
import random
import shutil
import signal
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest
from helpers.gguf_files import write_gguf
from helpers.projects import REPO, Built, Result, make_project
from helpers.sounds import CLIPS
from helpers.suites import TINY

SEED = 20261206
KEEP = (0.0, 0.1, 0.5, 0.99)  # a cut keeps this fraction of the file
FLIPS = 3                      # bits flipped, one case each, at seeded offsets
CASE_SECONDS = 300


def damaged(data: bytes, name: str) -> list[tuple[str, bytes]]:
    """The campaign's cases for one file: cuts, then single-bit flips (offsets seeded by the file's name)."""
    rng = random.Random(f"{SEED}:{name}")
    cases = [(f"cut to {int(f * 100)}%", data[:int(len(data) * f)]) for f in KEEP]
    for _ in range(FLIPS if data else 0):
        at, bit = rng.randrange(len(data)), 1 << rng.randrange(8)
        flipped = bytearray(data)
        flipped[at] ^= bit
        cases.append((f"bit {bit:#04x} of byte {at} flipped", bytes(flipped)))
    return cases


@contextmanager
def bounded(seconds: int = CASE_SECONDS) -> Iterator[None]:
    """A case that runs past `seconds` raises TimeoutError inside the command (the CLI's boundary turns it into
    exit 3, which fails the case): a hang is a failure, not a stuck suite."""
    def expire(*_: object) -> None:
        raise TimeoutError(f"the case ran past {seconds} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def clean(case: str, r: Result, allowed: tuple[int, ...] = (0, 1, 2)) -> Result:
    assert r.code in allowed, f"{case}: exit {r.code}\n{r.err[-2000:]}"
    assert "Traceback" not in r.err and "internal error" not in r.err, f"{case}:\n{r.err[-2000:]}"
    return r


def campaign(original: Path, run: Callable[[str, Path], None]) -> int:
    """Runs `run(case, path)` for every damaged copy of `original`, written in its place (restored after)."""
    data = original.read_bytes()
    cases = damaged(data, original.name)
    try:
        for case, bytes_ in cases:
            original.write_bytes(bytes_)
            with bounded():
                run(f"{original.name}: {case}", original)
    finally:
        original.write_bytes(data)
    return len(cases)


BUNDLE_FILES = ["runtime.bin", "runtime.json", "bundle.lock.json", "mlp_fp32.pte", "selftest/mlp_fp32.json"]


@pytest.mark.parametrize("name", BUNDLE_FILES)
def test_a_damaged_bundle_file_is_caught_by_the_lock(cli, suite: Built, tmp_path: Path, name: str) -> None:  # type: ignore[no-untyped-def]
    bundle = tmp_path / "bundle"
    shutil.copytree(suite.bundle("arduino_q"), bundle)

    def run(case: str, _: Path) -> None:
        r = clean(case, cli("inspect", str(bundle), "--json"))
        if name != "bundle.lock.json":  # every other file is hashed by the lock: any change is caught
            assert r.code in (1, 2), f"{case}: the damage went unnoticed"

    assert campaign(bundle / name, run) == 7


def test_a_damaged_archive_is_refused_in_every_command(cli, suite: Built, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    archive = tmp_path / "b.tar.gz"
    shutil.copy(suite.out / "suite" / "1.0.0" / "suite-1.0.0-arduino_q.tar.gz", archive)
    whole = archive.read_bytes()

    def run(case: str, path: Path) -> None:
        cut = len(path.read_bytes()) < len(whole)
        for args in (["inspect", str(path)], ["run", str(path), "--input", "x=1"], ["diff", str(path), str(path)],
                     ["profile", str(path)], ["report", str(path), "--out", str(tmp_path / "r.html")]):
            r = clean(f"{case}, deployc {args[0]}", cli(*args))
            if cut:  # a flip may land where it does not matter (the gzip header's time); a cut never does
                assert r.code == 2 and "archive" in r.err, f"{case}, deployc {args[0]}: {r.err[-500:]}"
                assert not (tmp_path / "r.html").exists()  # nothing half-written

    assert campaign(archive, run) == 7


def test_a_damaged_program_given_to_inspect(cli, suite: Built, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    pte = tmp_path / "m.pte"
    shutil.copy(suite.bundle("arduino_q") / "mlp_8da8w.pte", pte)
    assert campaign(pte, lambda case, path: clean(case, cli("inspect", str(path)), (0, 2)) and None) == 7


def test_a_damaged_saved_plan_is_refused_or_applied_whole(cli, tmp_path: Path,  # type: ignore[no-untyped-def]
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    manifest = make_project(tmp_path / "p", TINY, "tiny.yaml")
    monkeypatch.chdir(manifest.parent)
    cache = tmp_path / "cache"
    assert cli("plan", "tiny.yaml", "--out", "plan.json", "--cache-dir", str(cache)).code == 0
    assert cli("build", "--plan", "plan.json", "--out", "dist", "--cache-dir", str(cache)).code == 0
    good = sorted(p.relative_to(tmp_path / "p" / "dist") for p in (tmp_path / "p" / "dist").rglob("*"))

    def run(case: str, path: Path) -> None:
        out = tmp_path / "p" / "out"
        shutil.rmtree(out, ignore_errors=True)
        r = clean(case, cli("build", "--plan", str(path), "--out", str(out), "--cache-dir", str(cache)))
        if r.code != 0:  # refused: nothing written
            assert not out.exists() or not any(out.rglob("*.pte")), f"{case}: a half-written output"
        else:  # applied: the whole bundle, as the intact plan gives it
            assert sorted(p.relative_to(out) for p in out.rglob("*")) == good, case

    assert campaign(tmp_path / "p" / "plan.json", run) == 7


MODELS = """\
apiVersion: deployc/v1
name: inputs
version: 0.1.0
targets: [arduino_q]
models:
  classifier:
    task: classification
    source: {factory: models.small:mlp}
    inputs:
      x: {shape: [1, 64], dtype: float32}
    verify: {data: data/d.npz}
  encoder:
    task: embedding
    source: {huggingface: bert}
  llm:
    task: text-generation
    source: {gguf: tiny.gguf}
    dims:
      seq: {min: 1, max: 64}
    verify: {text: heldout.txt}
pipeline:
  inputs:
    question: {type: text}
  outputs:
    answer: answer.text
    sources: retrieve.chunks
  tokenizers:
    words: {path: bert/tokenizer.json}
    tok: {gguf: tiny.gguf}
  indexes:
    docs: {corpus: "docs/*.md", model: encoder, tokenizer: words}
  stages:
    - {name: question_tokens, op: tokenize, input: question, tokenizer: words, max_length: 16}
    - {name: embedded, op: model, model: encoder, inputs: {input_ids: question_tokens.input_ids, attention_mask: question_tokens.attention_mask}}
    - {name: retrieve, op: vector_search, index: docs, query: embedded.embedding, top_k: 1}
    - {name: answer, op: generate, model: llm, tokenizer: tok, prompt: question, max_new_tokens: 4}
"""


@pytest.fixture(scope="module")
def inputs_project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from helpers.hf_models import save_tiny_models

    folder = tmp_path_factory.mktemp("inputs")
    manifest = make_project(folder / "p", MODELS, "m.yaml")
    save_tiny_models(folder / "models_hf")
    shutil.copytree(folder / "models_hf" / "bert", manifest.parent / "bert")
    (manifest.parent / "data").mkdir()
    rng = np.random.default_rng(0)
    np.savez(manifest.parent / "data" / "d.npz", x=rng.standard_normal((4, 1, 64)).astype(np.float32))
    write_gguf(manifest.parent / "tiny.gguf")
    (manifest.parent / "heldout.txt").write_text("how do bees find flowers? " * 20)
    (manifest.parent / "docs").mkdir()
    (manifest.parent / "docs" / "bees.md").write_text("# Bees\nhow do bees find flowers?\n")
    return manifest


INPUT_FILES = ["data/d.npz", "bert/config.json", "bert/model.safetensors", "bert/tokenizer.json", "tiny.gguf",
               "heldout.txt", "docs/bees.md"]


@pytest.mark.parametrize("name", INPUT_FILES)
def test_a_damaged_model_or_data_file_is_a_located_error_at_plan_time(cli, inputs_project: Path, name: str,  # type: ignore[no-untyped-def]
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(inputs_project.parent)
    assert cli("plan", "m.yaml").code == 0, "the intact project plans"

    def run(case: str, _: Path) -> None:
        for command in ("validate", "plan"):
            r = clean(f"{case}, deployc {command}", cli(command, "m.yaml"), (0, 2))
            if r.code == 2:
                assert "m.yaml:" in r.err or name in r.err, f"{case}: the error is not located: {r.err[-500:]}"

    assert campaign(inputs_project.parent / name, run) == 7


def test_a_damaged_gguf_or_model_directory_given_to_init(cli, inputs_project: Path, tmp_path: Path,  # type: ignore[no-untyped-def]
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    gguf, bert = tmp_path / "t.gguf", tmp_path / "bert"
    shutil.copy(inputs_project.parent / "tiny.gguf", gguf)
    shutil.copytree(inputs_project.parent / "bert", bert)

    def run(target: Path) -> Callable[[str, Path], None]:
        def one(case: str, _: Path) -> None:
            for stale in tmp_path.glob("*.yaml"):
                stale.unlink()
            clean(case, cli("init", str(target)), (0, 2))
        return one

    assert campaign(gguf, run(gguf)) == 7
    assert campaign(bert / "config.json", run(bert)) == 7


def test_a_damaged_image_or_sound_given_to_run_is_a_preprocessing_error() -> None:
    """What `deployc run` and the pipeline's image and audio stages read from a user: decoded, or refused as a
    PreprocessError (exit 2, the stage named by the pipeline)."""
    from deployc.core.errors import PreprocessError
    from deployc.pipeline.host.images import prepare_image
    from deployc.pipeline.host.sounds import prepare_audio

    image_steps = json.loads((REPO / "tests" / "conformance" / "image" / "rgb_13x9.vector.json").read_text())
    audio_steps = json.loads((REPO / "tests" / "conformance" / "audio" / "tone_16k.vector.json").read_text())
    image = (REPO / "manifests" / "clip" / "images" / "red_circle.png").read_bytes()
    cases = 0
    for name, data, read in [
            ("red_circle.png", image, lambda b: prepare_image(b, image_steps["params"]["steps"])),
            ("pcm16_16k_mono.wav", CLIPS["pcm16_16k_mono.wav"], lambda b: prepare_audio(b, audio_steps["params"]["steps"]))]:
        for case, bytes_ in damaged(data, name):
            with bounded(60):
                try:
                    out = read(bytes_)
                except PreprocessError:
                    pass
                else:
                    assert np.isfinite(out).all(), f"{name}: {case}: non-finite values"
            cases += 1
    assert cases == 14


@pytest.mark.parametrize("name", ["program.pte", "entry.json"])
def test_a_damaged_cache_entry_is_discarded_and_rebuilt(tmp_path: Path, name: str) -> None:
    from deployc.build.cache import Cache

    cache = Cache(tmp_path / "cache")
    key = "ab" * 32

    def fresh() -> Path:
        staging = cache.tmp_dir()
        (staging / "program.pte").write_bytes(bytes(range(256)) * 8)
        (staging / "report.json").write_text('{"status": "built"}')
        cache.put(key, staging)
        entry, _ = cache.get(key)
        assert entry is not None
        return entry.file("program.pte").parent

    folder = fresh()

    def run(case: str, _: Path) -> None:
        entry, warning = cache.get(key)
        if entry is None:  # discarded, with a warning, and gone: the next build rebuilds it
            assert warning is not None and warning.startswith(f"cache entry {key[:12]} is corrupt"), case
            assert not cache.has(key), case
        else:  # a change that leaves the entry whole (entry.json's formatting): the files still match
            assert entry.file("program.pte").read_bytes() == bytes(range(256)) * 8, case
        if not cache.has(key):
            assert fresh() == folder

    assert campaign(folder / name, run) == 7
    (folder / "entry.json").write_text('{"files": ["program.pte"]}')  # valid JSON of the wrong shape
    entry, warning = cache.get(key)
    assert entry is None and warning is not None and "is corrupt" in warning
