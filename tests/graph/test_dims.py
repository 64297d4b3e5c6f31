"""Dim ranges a model does not take: torch.export's verdict as a located error with the edit that passes
(a smaller max, `multiple_of`, or a size left out), and `multiple_of` dims built, verified and carried
into the runtime config."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers.projects import build_json, make_project

from deployc.core.errors import UserError
from deployc.graph.dims import DimRejected, explain_rejected_dims
from deployc.load.project import load_project
from deployc.plan.build_plan import DimPlan

REJECTED = """\
apiVersion: deployc/v1
name: dims
version: 0.1.0
targets: [arduino_q]
models:
  blocky:
    source: {factory: "models.testnets:blocks"}
    inputs:
      x: {shape: [1, seq]}
    dims:
      seq: {min: 4, max: 64}
  posy:
    source: {factory: "models.testnets:positions"}
    inputs:
      x: {shape: [1, seq, 8]}
    dims:
      seq: {min: 2, max: 64}
  skipper:
    source: {factory: "models.testnets:skips_64"}
    inputs:
      x: {shape: [1, seq, 4]}
    dims:
      seq: {min: 4, max: 128}
"""

# The same models with the edits the errors proposed.
EDITED = (REJECTED.replace("seq: {min: 4, max: 64}", "seq: {min: 20, max: 60, multiple_of: 20}")
          .replace("seq: {min: 2, max: 64}", "seq: {min: 2, max: 32}")
          .replace("seq: {min: 4, max: 128}", "seq: {min: 4, max: 63}"))


@pytest.mark.slow
def test_rejected_ranges_are_located_with_the_edit_that_passes_and_the_edit_builds(tmp_path: Path) -> None:
    manifest = make_project(tmp_path / "project", REJECTED, "m.yaml")
    result, report = build_json(manifest, tmp_path / "dist", tmp_path / "cache")
    assert result.code == 1 and "Traceback" not in result.err
    failures = {u["model"]: u["failure"] for u in report["units"]}
    assert failures["blocky"]["at"] == f"{manifest}:11:12"
    assert failures["blocky"]["step"] == "export"
    assert failures["blocky"]["error"].startswith("models.blocky.dims.seq: torch.export rejects seq = 4..64: the "
                                                  "model needs (seq % 20) == 0")
    assert failures["blocky"]["error"].endswith("this range passes: seq: {min: 20, max: 60, multiple_of: 20}")
    assert failures["posy"]["error"].endswith("this range passes: seq: {min: 2, max: 32}")
    assert failures["skipper"]["error"] == ("models.skipper.dims.seq: torch.export rejects seq = 4..128: the model "
                                            "needs seq != 64; this range passes: seq: {min: 4, max: 63}")
    assert failures["skipper"]["at"] == f"{manifest}:23:12" and failures["posy"]["at"] == f"{manifest}:17:12"

    manifest.write_text(EDITED)
    result, report = build_json(manifest, tmp_path / "dist", tmp_path / "cache")
    assert result.code == 0, result.err[-2000:]
    blocky = next(u for u in report["units"] if u["model"] == "blocky")
    assert [p["dims"] for p in blocky["verification"]["points"]] == [{"seq": 20}, {"seq": 40}, {"seq": 60}]
    assert blocky["verification"]["status"] == "passed"
    config = json.loads((tmp_path / "dist" / "dims" / "0.1.0" / "arduino_q" / "runtime.json").read_text())
    shape = next(p for p in config["programs"] if p["name"] == "blocky")["methods"][0]["inputs"][0]["shape"]
    assert shape[1] == {"value": -1, "symbol": "seq", "min": 20, "max": 60, "multiple_of": 20}


TEXT_MULTIPLE = """\
Constraints violated (seq)! For more information, run with TORCH_LOGS="+dynamic".
  - Not all values of seq = L['x'].size()[1] in the specified range 4 <= seq <= 64 satisfy the generated guard (L['x'].size()[1] % 20) == 0.
  - Not all values of seq = L['x'].size()[1] in the specified range 4 <= seq <= 64 satisfy the generated guard 40 <= L['x'].size()[1] and L['x'].size()[1] <= 64
Suggested fixes:
  _seq = Dim('_seq', max=3)
  seq = 20*_seq
"""
TEXT_MAX = """\
Constraints violated (seq)! For more information, run with TORCH_LOGS="+dynamic".
  - Not all values of seq = L['x'].size()[1] in the specified range seq <= 64 satisfy the generated guard 2 <= L['x'].size()[1] and L['x'].size()[1] <= 32
Suggested fixes:
  seq = Dim('seq', max=32)
"""
TEXT_NOT = """\
Constraints violated (seq)! For more information, run with TORCH_LOGS="+dynamic".
  - Not all values of seq = L['x'].size()[1] in the specified range 4 <= seq <= 128 satisfy the generated guard L['x'].size()[1] != 64.
"""


TEXT_EXPRESSION = """\
Constraints violated (seq)! For more information, run with TORCH_LOGS="+dynamic".
  - Not all values of seq = L['input_ids'].size()[1] in the specified range seq <= 64 satisfy the generated guard ((-1) + L['input_ids'].size()[1]) != 1.
"""
TEXT_SUGGESTION_BREAKS_A_GUARD = """\
Constraints violated (seq)! For more information, run with TORCH_LOGS="+dynamic".
  - Not all values of seq = L['input_ids'].size()[1] in the specified range seq <= 64 satisfy the generated guard (8*L['input_ids'].size()[1]) != 120.
  - Not all values of seq = L['input_ids'].size()[1] in the specified range seq <= 64 satisfy the generated guard 15 <= L['input_ids'].size()[1] and L['input_ids'].size()[1] <= 64
Suggested fixes:
  seq = Dim('seq', min=15)
"""


@pytest.mark.parametrize("text,dim,edit", [
    (TEXT_EXPRESSION, DimPlan(name="seq", min=2, max=64), "seq: {min: 3, max: 64}"),  # MobileBERT
    (TEXT_SUGGESTION_BREAKS_A_GUARD, DimPlan(name="seq", min=2, max=64), "seq: {min: 16, max: 64}"),  # Gemma 3
    (TEXT_MULTIPLE, DimPlan(name="seq", min=4, max=64), "seq: {min: 20, max: 60, multiple_of: 20}"),
    (TEXT_MAX, DimPlan(name="seq", min=2, max=64), "seq: {min: 2, max: 32}"),
    (TEXT_NOT, DimPlan(name="seq", min=4, max=128), "seq: {min: 4, max: 63}"),
    (TEXT_NOT, DimPlan(name="seq", min=64, max=128), "seq: {min: 65, max: 128}"),
])
def test_torch_export_guards_become_manifest_edits(text: str, dim: DimPlan, edit: str) -> None:
    rejected = explain_rejected_dims(text, [dim])
    assert isinstance(rejected, DimRejected) and rejected.dim == "seq"
    assert str(rejected).endswith(f"this range passes: {edit}")


def test_other_export_errors_are_not_about_dims() -> None:
    assert explain_rejected_dims("Could not guard on data-dependent expression Eq(u0, 1)",
                                 [DimPlan(name="seq", min=1, max=8)]) is None


@pytest.mark.parametrize("dims,expected", [
    ("seq: {min: 21, max: 39, multiple_of: 20}",
     "m.yaml:11:12: error: models.m.dims.seq: no multiple of 20 lies between min 21 and max 39"),
    ("seq: {min: 4, max: 64, multiple_of: 1}", "models.m.dims.seq.multiple_of"),
])
def test_multiple_of_is_checked(tmp_path: Path, dims: str, expected: str) -> None:
    manifest = make_project(tmp_path, "apiVersion: deployc/v1\nname: t\nversion: 0.1.0\ntargets: [arduino_q]\n"
                            "models:\n  m:\n    source: {factory: 'models.small:mlp'}\n    inputs:\n"
                            "      x: {shape: [1, seq]}\n    dims:\n      " + dims + "\n", "m.yaml")
    with pytest.raises(UserError) as exc:
        load_project(manifest)
    assert any(expected in line for line in exc.value.lines()), exc.value.lines()


def test_a_tokenizer_cannot_feed_a_multiple_of_dim(tmp_path: Path) -> None:
    manifest = make_project(tmp_path, """\
apiVersion: deployc/v1
name: t
version: 0.1.0
targets: [arduino_q]
models:
  enc:
    task: embedding
    source: {factory: 'models.small:text_encoder'}
    inputs:
      tokens: {shape: [1, seq], dtype: int64, range: [0, 999]}
    dims:
      seq: {min: 8, max: 64, multiple_of: 8}
pipeline:
  inputs: {q: {type: text}}
  outputs: {e: embed.embedding}
  tokenizers: {t: {path: tok.json}}
  stages:
    - {name: tokens, op: tokenize, tokenizer: t, input: q, max_length: 64}
    - {name: embed, op: model, model: enc, inputs: {tokens: tokens.input_ids}}
""", "m.yaml")
    (tmp_path / "tok.json").write_text("{}")
    with pytest.raises(UserError) as exc:
        load_project(manifest)
    assert any("takes seq in multiples of 8; a tokenize stage cannot feed it yet" in line
               for line in exc.value.lines()), exc.value.lines()
