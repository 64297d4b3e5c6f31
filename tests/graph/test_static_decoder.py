"""The static form of deployc's decoder (graph/static_decoder.py: KV caches in and out, fixed chunks,
masks as inputs) driven by pipeline/host/static_decoding.py computes what the decoder with its cache
inside computes: prompts longer and shorter than a chunk, decoding after them, a second prompt over the
first's cache, every architecture the decoder knows."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from helpers.decoders import ARCHS, BASE, save_decoder

torch = pytest.importorskip("torch")


def _eager_call(static: torch.nn.Module):  # type: ignore[no-untyped-def]
    def call(method: str, inputs: list[np.ndarray]) -> list[np.ndarray]:
        with torch.no_grad():
            return [t.numpy() for t in static(*[torch.from_numpy(np.ascontiguousarray(x)) for x in inputs])]
    return call


@pytest.mark.parametrize(("arch", "decode"), [*((a, "own") for a in ARCHS), ("llama", "prefill")])
def test_the_static_form_driven_in_chunks_computes_what_the_cached_decoder_computes(tmp_path: Path, arch: str,
                                                                                    decode: str) -> None:
    from deployc.graph.decoder import load_decoder
    from deployc.graph.static_decoder import StaticDecoder, layout
    from deployc.pipeline.host.static_decoding import StaticDecoding
    from deployc.plan.build_plan import StaticForm

    save_decoder(tmp_path / arch, arch)
    context, chunk = 48, 8
    cached = load_decoder(tmp_path / arch, context)
    shapes = layout(cached, StaticForm(prefill=chunk, context=context, decode=decode))  # type: ignore[arg-type]
    widths: list[tuple[str, int]] = []
    eager = _eager_call(StaticDecoder(cached, context).eval())

    def call(method: str, inputs: list[np.ndarray]) -> list[np.ndarray]:
        widths.append((method, inputs[0].shape[1]))
        return eager(method, inputs)

    session = StaticDecoding(shapes, call)
    g = torch.Generator().manual_seed(3)
    # 19 tokens: two full chunks and a padded one; then 3 decodes; then a shorter prompt over the same caches.
    calls = [torch.randint(0, BASE["vocab_size"], (1, 19), generator=g)]
    calls += [torch.randint(0, BASE["vocab_size"], (1, 1), generator=g) for _ in range(3)]
    second = torch.randint(0, BASE["vocab_size"], (1, 5), generator=g)
    with torch.no_grad():
        pos = 0
        for tokens in calls:
            positions = torch.arange(pos, pos + tokens.shape[1])
            want = cached(tokens, positions)
            got = session.forward(tokens.numpy(), positions.numpy())
            assert got.shape == (1, BASE["vocab_size"])
            assert np.allclose(got, want.numpy(), atol=1e-4), f"{arch} at positions {pos}..{int(positions[-1])}"
            pos += tokens.shape[1]
        want = cached(second, torch.arange(5))
        assert np.allclose(session.forward(second.numpy(), np.arange(5)), want.numpy(), atol=1e-4)
    # A single token goes through its own method, or (one graph) through the prefill method padded to a chunk.
    single = ("decode", 1) if decode == "own" else ("prefill", chunk)
    assert widths == [("prefill", chunk)] * 3 + [single] * 3 + [("prefill", chunk)]
    assert shapes.methods() == ([("prefill", chunk), ("decode", 1)] if decode == "own" else [("prefill", chunk)])


@pytest.mark.parametrize("decode", ["own", "prefill"])
def test_a_prefix_tokens_position_0_comes_from_the_builds_float_rows_and_the_program_starts_at_1(
        tmp_path: Path, decode: str) -> None:
    from deployc.core.static_decoder import PREFIX_METHODS
    from deployc.graph.decoder import load_decoder
    from deployc.graph.static_decoder import StaticDecoder, calibration_calls, layout, prefix_rows
    from deployc.pipeline.host.static_decoding import StaticDecoding
    from deployc.plan.build_plan import StaticForm

    save_decoder(tmp_path / "llama", "llama")
    context, chunk, bos = 48, 8, 1
    cached = load_decoder(tmp_path / "llama", context)
    shapes = layout(cached, StaticForm(prefill=chunk, context=context, decode=decode,  # type: ignore[arg-type]
                                       prefix_token=bos))
    assert shapes.prefix_token == bos
    static = StaticDecoder(cached, context).eval()
    rows = prefix_rows(static, shapes)
    assert {k: tuple(v.shape) for k, v in rows.items()} == {
        "get_prefix_k": (2, 2, 8), "get_prefix_v": (2, 2, 8), "get_prefix_logits": (BASE["vocab_size"],)}
    eager = _eager_call(static)
    made: list[tuple[str, int, int]] = []  # (method, width, first position)

    def call(method: str, inputs: list[np.ndarray]) -> list[np.ndarray]:
        if method in PREFIX_METHODS:
            made.append((method, 0, 0))
            return [rows[method].numpy()]
        made.append((method, inputs[0].shape[1], int(inputs[1][0])))
        return eager(method, inputs)

    session = StaticDecoding(shapes, call)
    g = torch.Generator().manual_seed(5)
    prompt = torch.cat([torch.tensor([[bos]]), torch.randint(3, BASE["vocab_size"], (1, 9), generator=g)], dim=1)
    with torch.no_grad():
        for tokens in (prompt, prompt[:, :1]):  # a prompt, then bos alone (its logits are the build's)
            positions = torch.arange(tokens.shape[1])
            want = cached(tokens, positions).numpy()
            assert np.allclose(session.forward(tokens.numpy(), positions.numpy()), want, atol=1e-4)
        # Another first token is refused before the program runs: its ranges never saw a position 0.
        other = prompt.clone()
        other[0, 0] = 7
        calls_before = len(made)
        with pytest.raises(ValueError, match=r"built to start every sequence with token 1 \(its bos, computed in "
                                             r"float at build time: npu.prefix\); this one starts with 7"):
            session.forward(other.numpy(), np.arange(10))
        assert len(made) == calls_before
        assert np.allclose(session.forward(prompt.numpy(), np.arange(10)), cached(prompt, torch.arange(10)).numpy(),
                           atol=1e-4)
    # The rows are read once; the program is never called at position 0 for a bos-first sequence.
    assert [m for m, _, _ in made].count("get_prefix_k") == 1
    assert made[3][0] != "get_prefix_k" and made[3][2] == 1  # the prompt's 9 after bos: from position 1
    # The prompt's 9 tokens after bos: a chunk from position 1, then the last one (two methods: a decode call).
    program_calls = [(w, p) for m, w, p in made if m not in PREFIX_METHODS]
    assert program_calls[:2] == ([(chunk, 1), (1, 9)] if decode == "own" else [(chunk, 1), (chunk, 1 + chunk)])
    # Calibration: the observers see the program's calls only, from position 1, the rows in slot 0 of the caches.
    calls = calibration_calls(static, shapes, [[bos, *range(3, 34)]], rows)
    first = calls["prefill"][0]
    assert int(first[1][0]) == 1 and first[0][0].tolist() == list(range(3, 11))
    assert torch.equal(first[3][0, :, 0], rows["get_prefix_k"][0])


@pytest.mark.parametrize("decode", ["own", "prefill"])
def test_calibration_reads_text_as_the_driver_does_and_one_graph_in_whole_chunks(tmp_path: Path, decode: str) -> None:
    """Two methods: half of each sequence in chunks, the rest and the first chunk again one token a call (the
    decode method sees real caches and few keys). One graph: whole chunks only, no padded one-token steps."""
    from deployc.graph.decoder import load_decoder
    from deployc.graph.static_decoder import StaticDecoder, calibration_calls, layout
    from deployc.plan.build_plan import StaticForm

    save_decoder(tmp_path / "llama", "llama")
    cached = load_decoder(tmp_path / "llama", 48)
    shapes = layout(cached, StaticForm(prefill=8, context=48, decode=decode))  # type: ignore[arg-type]
    sequences = [list(range(3, 35)), list(range(40, 60))]  # 32 and 20 tokens
    calls = calibration_calls(StaticDecoder(cached, 48).eval(), shapes, sequences)
    if decode == "own":
        # 32: 2 chunks of its first 16, 16 one-token calls, 8 more from position 0; 20: 2 chunks (10), 10, 8.
        assert {n: len(c) for n, c in calls.items()} == {"prefill": 4, "decode": 16 + 8 + 10 + 8}
    else:
        assert {n: len(c) for n, c in calls.items()} == {"prefill": 4 + 3}  # 32 = 4 chunks; 20 = 3, the last padded
        tokens = [c[0][0].tolist() for c in calls["prefill"]]
        assert tokens[0] == list(range(3, 11)) and tokens[4] == list(range(40, 48))
        assert tokens[6] == [56, 57, 58, 59, 0, 0, 0, 0]


def test_seeded_calibration_sequences_start_with_the_prefix_token() -> None:
    """A decoder without a tokenizer is calibrated on seeded ids: with a prefix token, each starts with it (its
    driver refuses a sequence that starts otherwise)."""
    from types import SimpleNamespace

    from deployc.graph.worker import _calibration_text
    from deployc.plan.build_plan import StaticForm

    def unit(prefix: int | None) -> Any:
        recipe = SimpleNamespace(calibration_seed=3, calibration_samples=4)
        return SimpleNamespace(quantize=SimpleNamespace(text=None, recipe=recipe),
                               export=SimpleNamespace(static=StaticForm(prefill=8, context=48, prefix_token=prefix)))

    plain, prefixed = _calibration_text(unit(None), 120), _calibration_text(unit(1), 120)
    assert len(prefixed) == 4 and all(s[0] == 1 and len(s) == 24 for s in prefixed)
    assert [s[1:] for s in prefixed] == [s[1:] for s in plain]


def test_a_call_beyond_the_context_is_refused_before_the_program_runs() -> None:
    from deployc.core.static_decoder import StaticDecoderLayout
    from deployc.pipeline.host.static_decoding import StaticDecoding

    ran: list[str] = []
    session = StaticDecoding(StaticDecoderLayout(chunk=4, context=8, layers=1, kv_heads=1, head_dim=2),
                             lambda method, inputs: ran.append(method) or [])
    with pytest.raises(ValueError, match=r"positions 6\.\.8 are beyond the context of 8"):
        session.forward(np.zeros((1, 3)), np.arange(6, 9))
    with pytest.raises(ValueError, match="consecutive"):
        session.forward(np.zeros((1, 2)), np.array([0, 2]))
    assert ran == []


def _project(tmp_path: Path, models_text: str, targets: str = "[snapdragon]") -> Path:
    from helpers.projects import make_project

    manifest = make_project(tmp_path / "project", f"apiVersion: deployc/v1\nname: t\nversion: 0.1.0\n"
                            f"targets: {targets}\nmodels:\n" + models_text, "m.yaml")
    save_decoder(tmp_path / "project" / "hf" / "llama", "llama")
    return manifest


LLM = "  llm:\n    task: text-generation\n    source: {huggingface: hf/llama}\n    quantization: w8a8\n"


@pytest.mark.parametrize("model_text,message", [
    ("    npu: {prefill: 32, context: 16}\n",
     "m.yaml:10:20: error: models.llm.npu.prefill: a chunk of 32 tokens is longer than the context of 16"),
    ("    npu: {prefill: 8, context: 100}\n",
     "m.yaml:10:32: error: models.llm.npu.context: 100 positions are beyond the model's constants.max_seq_len (64)"),
    ("    overrides:\n      snapdragon: {npu: {prefill: 8, context: 100}}\n",
     "m.yaml:11:47: error: models.llm.overrides.snapdragon.npu.context: 100 positions are beyond the model's "
     "constants.max_seq_len (64)"),
])
def test_a_static_form_that_cannot_be_is_a_located_error(tmp_path: Path, model_text: str, message: str, cli) -> None:
    r = cli("validate", str(_project(tmp_path, LLM + model_text)))
    assert r.code == 2 and message in r.err, r.err


def test_the_static_form_is_for_decoders(tmp_path: Path, cli) -> None:
    manifest = _project(tmp_path, "  mlp:\n    source: {factory: 'models.small:mlp'}\n"
                                  "    inputs: {x: {shape: [1, 64]}}\n    npu: {prefill: 8, context: 16}\n")
    r = cli("validate", str(manifest))
    assert r.code == 2
    assert ("m.yaml:9:5: error: models.mlp.npu: the static form applies to text-generation models with the decoder's "
            "inputs (tokens, input_pos)") in r.err


def test_a_decoder_without_its_static_form_is_planned_on_the_cpu_with_the_reason(tmp_path: Path, cli) -> None:
    r = cli("plan", str(_project(tmp_path, LLM)))
    assert r.code == 0, r.err
    assert ("llm on snapdragon: skipped npu (qnn): takes a decoder only in its static form (KV caches in and out, "
            "fixed chunks): give models.llm.npu: {prefill: N, context: M}, or overrides.snapdragon.npu") in r.out
    pinned = LLM + "    overrides:\n      snapdragon: {unit: npu}\n"
    r = cli("plan", str(_project(tmp_path, pinned)))
    assert r.code == 2 and "m.yaml:11:26: error: models.llm.overrides.snapdragon.unit: unit 'npu' (qnn) cannot " \
                           "build this model: takes a decoder only in its static form" in r.err, r.err


def test_the_plan_builds_the_static_form_within_its_context(tmp_path: Path, cli) -> None:
    from deployc.load.project import load_project
    from deployc.plan import calibration_text
    from deployc.plan.heldout import text_ids
    from deployc.plan.planner import make_plan
    from deployc.plan.toolchain import detect

    manifest = _project(tmp_path, LLM + "    npu: {prefill: 8, context: 40}\n    overrides:\n      snapdragon: "
                                        "{unit: npu}\n")
    [unit] = make_plan(load_project(manifest), detect()).units()
    assert (unit.unit, unit.backend, unit.quantization) == ("npu", "qnn", "w8a8")
    assert unit.export.static is not None and (unit.export.static.prefill, unit.export.static.context) == (8, 40)
    assert unit.lower.constants["max_seq_len"] == 40 and unit.load.context == 40
    assert [(d.name, d.min, d.max) for d in unit.export.dims] == [("seq", 1, 40)]  # judged within the context
    r = cli("plan", str(manifest))
    bos = unit.lower.constants["bos_id"]
    assert unit.export.static.prefix_token == bos  # the default where the model has a bos token
    assert ("llm on snapdragon (npu): static form: a prefill method of 8 tokens a call and a decode method of 1, KV "
            f"caches of 40 positions in and out; position 0 (bos, token {bos}) computed in float at build time, each "
            "call from position 1; calibrated on 8 stretches of 40 tokens of deployc's calibration sample "
            "(deployc/plan/calibration_sample.txt) through the same driver") in r.out
    assert unit.quantize.text is not None and unit.export.text is not None
    assert unit.quantize.text.file == "deployc's calibration sample (deployc/plan/calibration_sample.txt)"
    assert [len(s) for s in unit.quantize.text.sequences] == [40] * 8
    # Ranges calibrated on text are used as calibrated; seeded random calibration keeps QNN's widening.
    assert unit.quantize.recipe.widen_ranges is False and "over their calibrated range" in unit.quantize.description
    # Consecutive stretches of the sample's tokens, each after the model's bos.
    ids = text_ids(calibration_text.DEFAULT_SAMPLE, tmp_path / "project" / "hf" / "llama" / "tokenizer.json")
    assert unit.quantize.text.sequences == [[bos, *ids[j * 39:(j + 1) * 39]] for j in range(8)]


def test_npu_prefix_none_keeps_position_0_in_the_program_and_bos_without_a_bos_token_is_a_located_error(
        tmp_path: Path, cli) -> None:
    from deployc.load.project import load_project
    from deployc.plan.planner import make_plan
    from deployc.plan.toolchain import detect

    manifest = _project(tmp_path, LLM + "    npu: {prefill: 8, context: 40, prefix: none}\n    overrides:\n"
                                        "      snapdragon: {unit: npu}\n")
    [unit] = make_plan(load_project(manifest), detect()).units()
    assert unit.export.static is not None and unit.export.static.prefix_token is None
    assert "position 0" not in cli("plan", str(manifest)).out
    for name in ("config.json", "generation_config.json"):  # the model without a bos token
        path = manifest.parent / "hf" / "llama" / name
        if path.is_file():
            path.write_text(json.dumps({k: v for k, v in json.loads(path.read_text()).items() if k != "bos_token_id"}))
    text = manifest.read_text().replace("prefix: none", "prefix: bos")
    manifest.write_text(text)
    r = cli("plan", str(manifest))
    line = text.splitlines().index(next(x for x in text.splitlines() if "prefix: bos" in x)) + 1
    assert r.code == 2 and f"m.yaml:{line}" in r.err, r.err
    assert ("models.llm: npu.prefix is bos, but the model has no bos token (constants.bos_id)" in r.err
            and "set npu.prefix: none" in r.err), r.err
    manifest.write_text(text.replace("prefix: bos", "prefix: none"))
    assert cli("plan", str(manifest)).code == 0


CALIBRATED = LLM.replace("w8a8", "{scheme: w8a8, calibration: {text: %s}}") + "    npu: {prefill: 8, context: 40}\n"
QUOTE = "The harbour town woke slowly in winter. Before the sun cleared the hills, the bakers had already lit"


@pytest.mark.parametrize(("text", "verify", "message"), [
    ("held.txt", "held.txt", "m.yaml:9:54: error: models.llm.quantization.calibration.text: held.txt is the held-out "
                             "text the program is judged on: its figures would be measured on what the quantizer saw"),
    ("quoting.txt", None, "m.yaml:9:54: error: models.llm.quantization.calibration.text: quoting.txt shares 12 words "
                          "in a row with the held-out text deployc's sample (deployc/plan/heldout_sample.txt) (\"The "
                          "harbour town woke slowly in winter. Before the sun cleared the\"): the program would "
                          "be judged on text the quantizer saw"),
    ("short.txt", None, "m.yaml:9:54: error: models.llm.quantization.calibration.text: short.txt gives 60 tokens with "
                        "hf/llama/tokenizer.json; 8 calibration samples of 40 tokens take 312"),
])
def test_a_calibration_text_the_program_would_be_judged_on_is_a_located_error(tmp_path: Path, text: str,
                                                                              verify: str | None, message: str,
                                                                              cli) -> None:
    manifest = _project(tmp_path, CALIBRATED % text + (f"    verify: {{text: {verify}}}\n" if verify else ""))
    words = " ".join(["ledger", "lathe", "pivot"] * 20)
    long = "\n".join(f"{words} {i}" for i in range(20))
    (manifest.parent / text).write_text({"quoting.txt": f"{long} {QUOTE}", "short.txt": words}.get(text, long))
    r = cli("plan", str(manifest))
    assert r.code == 2 and message in r.err, r.err


def test_a_cpu_decoder_in_a_calibrated_scheme_is_calibrated_on_its_text_too(tmp_path: Path, cli) -> None:
    """XNNPACK's w8a8: each stretch's first tokens as one prompt, at the export's length."""
    from deployc.graph.inputs import export_point
    from deployc.graph.quantize import calibration_samples
    from deployc.load.project import load_project
    from deployc.plan.planner import make_plan
    from deployc.plan.toolchain import detect

    manifest = _project(tmp_path, LLM, targets="[arduino_q]")
    r = cli("plan", str(manifest))
    assert ("llm on arduino_q (cpu): calibrated on 8 stretches of 64 tokens of deployc's calibration sample "
            "(deployc/plan/calibration_sample.txt), each as a prompt") in r.out, r.out
    [unit] = make_plan(load_project(manifest), detect()).units()
    assert unit.quantize.text is not None and unit.export.static is None
    samples = calibration_samples(unit.quantize.recipe, unit.export, manifest.parent, unit.quantize.text)
    length = export_point(unit.export.dims)["seq"]
    assert [s[0][0].tolist() for s in samples] == [ids[:length] for ids in unit.quantize.text.sequences]
    assert all(s[1].tolist() == list(range(length)) for s in samples)


@pytest.mark.parametrize(("model_text", "message"), [
    (CALIBRATED % "missing.txt", "m.yaml:9:54: error: models.llm.quantization.calibration.text: missing.txt is not a "
                                 "file next to the manifest"),
    (LLM.replace("w8a8", "{scheme: w8a8, calibration: {text: a.txt, dataset: b.pt}}"),
     "give `text` (a decoder's calibration text) or `dataset` (tensors), not both"),
    ("  mlp:\n    source: {factory: 'models.small:mlp'}\n    inputs: {x: {shape: [1, 64]}}\n"
     "    quantization: {scheme: w8a8, calibration: {text: a.txt}}\n",
     "models.mlp.quantization.calibration.text: a calibration text is for text-generation models; this one's task "
     "is other"),
])
def test_a_calibration_text_out_of_place_is_a_located_error(tmp_path: Path, model_text: str, message: str,
                                                             cli) -> None:
    r = cli("validate", str(_project(tmp_path, model_text)))
    assert r.code == 2 and message in r.err, r.err


NPU_DECODER = """\
apiVersion: deployc/v1
name: npu-gen
version: 0.1.0
targets: [snapdragon]
models:
  llm:
    task: text-generation
    source: {huggingface: hf/llama}
    quantization: fp16
    npu: {prefill: 8, context: 48}
    overrides:
      snapdragon: {unit: npu}
  coded:
    task: text-generation
    source: {factory: "models.testnets:deployc_decoder"}
    inputs:
      tokens: {shape: [1, seq], dtype: int64, range: [0, 119]}
      input_pos: {shape: [seq], dtype: int64, fill: arange}
    dims: {seq: {min: 1, max: 48}}
    outputs: {logits: {shape: [1, 120]}}
    constants: {max_seq_len: 48, eos_ids: [2], vocab_size: 120}
    quantization: fp16
    npu: {prefill: 8, context: 48, decode: prefill}
    overrides:
      snapdragon: {unit: npu}
pipeline:
  inputs: {query: {type: text}}
  outputs: {answer: answer.text, tokens: answer.tokens}
  tokenizers:
    words: {huggingface: hf/llama}
  stages:
    - {name: answer, op: generate, model: llm, tokenizer: words, prompt: query, max_new_tokens: 12}
"""


@pytest.fixture(scope="module")
def npu_decoder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny decoder in the static form on the snapdragon npu, fp16, verified on the HTP emulator (about a
    minute on 2 cores)."""
    from helpers.projects import build_json, make_project
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    folder = tmp_path_factory.mktemp("npu-decoder")
    manifest = make_project(folder / "project", NPU_DECODER, "gen.yaml")
    directory = folder / "project" / "hf" / "llama"
    save_decoder(directory, "llama")
    # The same vocabulary as WordPiece, which the native runner reads too (not WordLevel).
    tk = Tokenizer(models.WordPiece(Tokenizer.from_file(str(directory / "tokenizer.json")).get_vocab(),
                                    unk_token="[UNK]"))
    tk.pre_tokenizer, tk.decoder = pre_tokenizers.BertPreTokenizer(), decoders.WordPiece()
    tk.save(str(directory / "tokenizer.json"))
    result, report = build_json(manifest, folder / "dist", folder / "cache", timeout=1200)
    assert result.code == 0, result.err[-3000:]
    assert [u["status"] for u in report["units"]] == ["built", "built"]
    (folder / "build.json").write_text(json.dumps(report))
    return folder / "dist" / "npu-gen" / "0.1.0" / "snapdragon"


@pytest.mark.slow
def test_the_plan_says_how_many_calls_of_each_method_the_verification_makes(npu_decoder: Path) -> None:
    from deployc.load.project import load_project
    from deployc.plan.planner import make_plan
    from deployc.plan.static_checks import verification_calls
    from deployc.plan.toolchain import detect

    folder = npu_decoder.parents[3]
    report = json.loads((folder / "build.json").read_text())
    made = {u["model"]: {name: c["calls"] for name, c in u["verification"]["method_calls"].items()}
            for u in report["units"]}
    planned = {u.model: verification_calls(u) for u in make_plan(load_project(folder / "project" / "gen.yaml"),
                                                                   detect()).units()}
    assert made == planned
    # Two methods: each token eager chose is one decode call. One graph: points of 1 and 8 tokens (two inputs
    # each), seeded prompts of 5 and 12 tokens read with the 31 chosen in 5 and 6 chunks of 8; no call is made again
    # to time it (the latency is the median of the calls made).
    assert planned["llm"]["decode"] > 8 * 31
    assert planned["coded"] == {"prefill": 2 * 2 + 4 * 5 + 4 * 6}


@pytest.mark.slow
def test_the_npu_decoder_is_verified_on_the_emulator_and_described_for_the_app(npu_decoder: Path) -> None:
    import json

    config = json.loads((npu_decoder / "runtime.json").read_text())
    llm, coded = (next(p for p in config["programs"] if p["name"] == n) for n in ("llm", "coded"))
    # A factory's decoder (deployc's class, built in code) gets the same form; without a tokenizer it is
    # judged by greedy parity from seeded prompts.
    assert (coded["unit"], coded["static_decoder"]["context"]) == ("npu", 48)
    assert coded["verification"]["status"] == "passed" and coded["verification"]["tokens_generated"] == 32
    assert coded["verification"]["tokens_prompts"] == 8 and coded["verification"]["text_positions"] == 0
    # npu.decode: prefill: one method, new tokens through it; greedy parity read in its chunks (teacher-forced).
    assert (coded["static_decoder"]["prefill_method"], coded["static_decoder"]["decode_method"]) == ("prefill",
                                                                                                       "prefill")
    assert [m["name"] for m in coded["methods"] if m["inputs"]] == ["prefill"]
    assert (llm["unit"], llm["backend"], llm["quantization"]) == ("npu", "qnn", "fp16")
    v = llm["verification"]
    assert v["status"] == "passed" and v["tokens_matched"] == 32 and v["tokens_identical"] == 8
    assert v["text_positions"] == 4 * 48 and v["top1"] == 1.0 and v["kl"] < 1e-4
    assert llm["static_decoder"] == {
        "prefill_method": "prefill", "decode_method": "decode", "chunk": 8, "context": 48, "layers": 2,
        "kv_heads": 2, "head_dim": 8, "masked_value": -255.0, "update": "index_write", "prefix_token": 1,
        "mask_layout": "[1, 1, T, context + T]: keys are the cache slots, then the call's T tokens; the query at "
                       "position p sees the slots before the call's first position and the call's own tokens up to p"}
    methods = {m["name"]: m for m in llm["methods"]}
    shapes = {name: [(t["name"], t["dtype"], [d["value"] for d in t["shape"]]) for t in methods[name]["inputs"][:4]]
              for name in ("prefill", "decode")}
    assert shapes["prefill"] == [("tokens", "int32", [1, 8]), ("input_pos", "int32", [8]),
                                 ("mask", "float32", [1, 1, 8, 56]), ("k_cache_0", "float32", [1, 2, 48, 8])]
    assert shapes["decode"][2] == ("mask", "float32", [1, 1, 1, 49])
    assert [(t["name"], [d["value"] for d in t["shape"]]) for t in methods["prefill"]["outputs"][:2]] == [
        ("logits", [1, 8, BASE["vocab_size"]]), ("k_0", [1, 2, 8, 8])]
    assert methods["prefill"]["delegates"] == ["QnnBackend"] and methods["decode"]["delegates"] == ["QnnBackend"]
    # Position 0 of bos, computed in float at build time: constant methods beside the two.
    assert {name: [] for name in ("get_prefix_k", "get_prefix_v", "get_prefix_logits")}.items() <= {
        name: m["inputs"] for name, m in methods.items()}.items()
    assert coded["static_decoder"]["prefix_token"] == -1  # a factory's decoder without constants.bos_id
    generate = next(s for s in config["pipeline"]["stages"] if s["op"] == "generate")
    assert json.loads(generate["params_json"])["max_seq_len"] == 48  # the context it was built with


@pytest.mark.slow
def test_deployc_run_and_the_native_runner_generate_the_same_tokens(npu_decoder: Path, runner: Path,
                                                                    tmp_path: Path) -> None:
    import json
    import os
    import subprocess

    from helpers.projects import run_subprocess

    from deployc.targets.backends.qnn.host import environment

    long = " ".join(["how do bees find flowers ?"] * 20)  # 120 words: beyond the 48-position context
    for query in ("how do bees find flowers ?", long):
        r = run_subprocess("run", str(npu_decoder), "--input", f"query={query}", "--json", cwd=tmp_path,
                           env={"DEPLOYC_CACHE_DIR": str(tmp_path / "cache")})
        assert r.code == 0, r.err[-2000:]
        python = json.loads(r.out)
        proc = subprocess.run([str(runner), str(npu_decoder), "--pipeline", "--text", f"query={query}"],
                              capture_output=True, text=True, timeout=600, env={**os.environ, **environment()})
        assert proc.returncode == 0, proc.stderr[-2000:]
        native = json.loads(proc.stdout)
        assert native["stages"]["answer"]["tokens"]["data"] == python["outputs"]["tokens"][0]
        assert native["outputs"]["answer"] == python["outputs"]["answer"] != ""
        assert python["generation"]["prompt_tokens"] == (7 if query != long else 36)  # 48 - 12 new: the last 36
    # Built with bos's position 0 in float (npu.prefix): a sequence that starts otherwise is refused, naming why.
    import numpy as np

    np.save(tmp_path / "tokens.npy", np.asarray([[7, 8, 9]], dtype=np.int64))
    np.save(tmp_path / "pos.npy", np.arange(3, dtype=np.int64))
    proc = subprocess.run([str(runner), str(npu_decoder), "--program", "llm", "--input", str(tmp_path / "tokens.npy"),
                           "--input", str(tmp_path / "pos.npy")], capture_output=True, text=True, timeout=600,
                          env={**os.environ, **environment()})
    assert proc.returncode == 2 and ("llm: this decoder was built to start every sequence with token 1 (its bos, "
                                     "computed in float at build time: npu.prefix); this one starts with 7"
                                     ) in proc.stderr, proc.stderr[-2000:]


@pytest.mark.slow
def test_the_self_tests_drive_the_static_form_on_the_host_and_natively(npu_decoder: Path, runner: Path,
                                                                       cli) -> None:
    import json
    import os
    import subprocess

    from deployc.targets.backends.qnn.host import environment

    r = cli("inspect", str(npu_decoder), "--self-test", "--json")
    assert r.code == 0, r.err[-2000:]
    hosts = {p["program"]: p for p in json.loads(r.out)["self_test"]}
    proc = subprocess.run([str(runner), str(npu_decoder), "--self-test"], capture_output=True, text=True, timeout=600,
                          env={**os.environ, **environment()})
    assert proc.returncode == 0, proc.stderr[-2000:]
    natives = {p["program"]: p for p in json.loads(proc.stdout)["programs"]}
    host, native = hosts["llm"], natives["llm"]
    assert host["status"] == native["status"] == "passed"
    assert abs(host["text"]["kl"] - native["text"]["kl"]) < 1e-6 and host["cases"] == native["cases"]
    # One graph (npu.decode: prefill): the runner pads a single token to the chunk as the host driver does.
    assert hosts["coded"]["status"] == natives["coded"]["status"] == "passed"
    assert hosts["coded"]["cases"] == natives["coded"]["cases"] > 0


BLOCKED = """\
apiVersion: deployc/v1
name: blocked
version: 0.1.0
targets: [snapdragon]
models:
  llm:
    task: text-generation
    source: {huggingface: hf/qwen2}
    quantization: 16a4w
    npu: {prefill: 8, context: 48, decode: prefill}
    verify: {max_perplexity_ratio: 100.0, max_kl: 10.0, min_top1: 0.0}
    overrides:
      snapdragon: {unit: npu}
"""


@pytest.mark.full  # make test-all: a build of its own (40 s), beside the QNN suite's blocked 16a4w programs
def test_a_tied_decoder_in_16a4w_is_built_with_blocked_linears_and_runs_on_the_emulator(tmp_path: Path) -> None:
    """16a4w's linears in blocks of 32 inputs (QNN's LPBQ, lowered as 1x1 convolutions), the output layer at 8
    bits: a tied output layer is untied for that lowering (it failed on the shared weight), and the program runs
    on the emulator close to its fake-quantized simulation (a blocked linear measured 1.3 dB there)."""
    from helpers.projects import build_json, make_project

    manifest = make_project(tmp_path / "project", BLOCKED, "m.yaml")
    save_decoder(tmp_path / "project" / "hf" / "qwen2", "qwen2")  # tie_word_embeddings
    result, report = build_json(manifest, tmp_path / "dist", tmp_path / "cache", timeout=1200)
    [unit] = report["units"]
    assert result.code == 0 and unit["status"] == "built", (unit.get("failure"), result.err[-2000:])
    assert unit["delegates"] == {"QnnBackend": 1} and unit["delegated_share"] == 1.0
    v = unit["verification"]
    assert v["text"]["kl"] < 0.5 and min(p["outputs"][0]["sqnr_db"] for p in v["points"]) > 10.0, v


NOT_OURS = """\
apiVersion: deployc/v1
name: not-ours
version: 0.1.0
targets: [snapdragon]
models:
  llm:
    task: text-generation
    source: {factory: "models.tiny_llm:build", kwargs: {vocab_size: 64, dim: 16, layers: 1, heads: 2, hidden: 32,
                                                          max_seq_len: 32}}
    inputs:
      tokens: {shape: [1, seq], dtype: int64, range: [0, 63]}
      input_pos: {shape: [seq], dtype: int64, fill: arange}
    dims: {seq: {min: 1, max: 32}}
    constants: {max_seq_len: 32, eos_ids: [2]}
    quantization: fp16
    npu: {prefill: 8, context: 32}
    overrides:
      snapdragon: {unit: npu}
"""


@pytest.mark.slow
def test_a_decoder_the_static_form_cannot_be_made_from_fails_at_export_naming_why(tmp_path: Path) -> None:
    from helpers.projects import make_project, run_subprocess

    manifest = make_project(tmp_path / "project", NOT_OURS, "m.yaml")
    r = run_subprocess("build", str(manifest), "--out", str(tmp_path / "dist"), "--cache-dir", str(tmp_path / "cache"),
                       cwd=manifest.parent)
    assert r.code == 1 and "Traceback" not in r.err
    assert ("FAILED llm on snapdragon (npu) at export: the static form is made from deployc's decoder (a "
            "Llama-family Hugging Face directory, or a factory returning deployc.graph.decoder.Decoder); this model "
            "is a TinyLlama") in r.out, r.out
