"""The manifest's cross-field rules (load/manifest.py's MODEL_RULES), called directly on parsed text: each rule
reports at its own line, in the order the rules run, and a manifest that breaks none gives nothing."""

from __future__ import annotations

from pathlib import Path

from deployc.core.yaml_io import load_text
from deployc.load.manifest import MODEL_RULES, check_references, parse_manifest

HEAD = "apiVersion: deployc/v1\nname: m\nversion: 0.1.0\ntargets: [arduino_q]\nmodels:\n"
GOOD = """\
  net:
    source: {factory: "models.small:mlp"}
    inputs:
      x: {shape: [batch, 8]}
    dims:
      batch: {min: 1, max: 4}
"""


def _problems(models: str, head: str = HEAD) -> list[str]:
    doc = load_text(head + models, Path("m.yaml"))
    return [f"{d.location.line}: {d.message}" for d in check_references(parse_manifest(doc), doc)]


def test_a_manifest_that_breaks_no_rule_gives_nothing() -> None:
    assert _problems(GOOD) == []


def test_each_rule_reports_at_its_own_line_in_rule_order() -> None:
    models = """\
  net:
    source: {factory: "models.small:mlp", huggingface: hf}
    inputs:
      x: {shape: [seq, 8]}
      flag: {shape: [1], dtype: bool, range: [0, 2]}
    dims:
      batch: {min: 4, max: 2}
    verify: {tokens: 4}
    methods:
      get_size: {inputs: {y: {shape: [1]}}}
    overrides:
      snapdragon: {quantization: 8da8w}
"""
    assert _problems(models) == [
        "7: models.net.source: give one of `factory`, `huggingface` or `gguf`",
        "13: models.net.verify.tokens: token parity applies to text-generation models; models.net has task "
        "other",
        "9: models.net.inputs.x.shape[0]: dim 'seq' is not declared under models.net.dims",
        "15: models.net.methods.get_size: 'forward' and names starting with 'get_' (constant methods) are reserved",
        "10: models.net.inputs.flag.range: bool inputs take a range within [0, 1]",
        "12: models.net.dims.batch: min 4 is greater than max 2",
        "12: models.net.dims.batch: dim is declared but no input uses it",
        "17: models.net.overrides.snapdragon: 'snapdragon' is not one of this manifest's targets",
    ]


def test_a_target_listed_twice_comes_before_any_model_rule() -> None:
    head = HEAD.replace("targets: [arduino_q]", "targets: [arduino_q, arduino_q]")
    assert _problems(GOOD.replace("[batch, 8]", "[seq, 8]"), head)[0] == \
        "4: targets[1]: target 'arduino_q' is listed twice"


def test_the_rules_are_one_function_each_run_in_a_fixed_order() -> None:
    names = [rule.__name__ for rule in MODEL_RULES]
    assert names == ["_source", "_verify_fits_task", "_npu", "_shape_dims_declared", "_methods", "_bool_ranges",
                     "_dims", "_quantization", "_overrides"]
