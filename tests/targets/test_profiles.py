"""Profiles: the built-in ones, inheritance, the search path, `targets` commands."""

from __future__ import annotations

import json
from pathlib import Path

from deployc.targets.profile import BUILTIN_DIR, load_profile, search_path

REPO = Path(__file__).resolve().parents[2]


def test_builtin_profiles_carry_the_hardware_figures() -> None:
    dirs = [REPO / "targets"]
    sd = load_profile("snapdragon", REPO, dirs).profile
    assert [(u.name, u.backend) for u in sd.units] == [("npu", "qnn"), ("gpu", "vulkan"), ("cpu", "xnnpack")]
    assert sd.units[0].options == {"soc_model": "SM8650", "htp_arch": 75}
    assert sd.budgets.ram == 2 * 2**30 and sd.budgets.storage == 4 * 2**30
    aq = load_profile("arduino_q", REPO, dirs).profile
    mcu = aq.unit("mcu")
    assert mcu is not None and mcu.backend == "cortex_m" and mcu.quantization == ["w8a8"]
    assert mcu.budgets is not None and mcu.budgets.flash == int(1.5 * 2**20) and mcu.budgets.sram == 512 * 2**10
    assert aq.unit("cpu").budgets.ram == 2**30


def test_extends_deep_merges_and_replaces_lists(tmp_path: Path) -> None:
    (tmp_path / "targets").mkdir()
    (tmp_path / "targets" / "elite.yaml").write_text(
        "apiVersion: deployc/v1\nname: elite\nextends: ../base/snapdragon.yaml\n"
        "device: {soc: SM8750}\n"
        "units:\n  - {name: cpu, backend: xnnpack, threads: 6, quantization: [8da4w]}\n"
        "budgets: {ram: 3GiB}\n")
    (tmp_path / "base").mkdir()
    (tmp_path / "base" / "snapdragon.yaml").write_text((REPO / "targets" / "snapdragon.yaml").read_text())
    loaded = load_profile("elite", tmp_path, search_path(tmp_path, {}))
    p = loaded.profile
    assert p.device.soc == "SM8750" and p.device.os == "android"  # merged mapping
    assert [u.name for u in p.units] == ["cpu"] and p.units[0].threads == 6  # list replaced
    assert p.budgets.ram == 3 * 2**30 and p.budgets.storage == 4 * 2**30
    assert [f.name for f in loaded.files] == ["elite.yaml", "snapdragon.yaml"]


def test_env_search_path(tmp_path: Path, monkeypatch, cli) -> None:
    extra = tmp_path / "shared-profiles"
    extra.mkdir()
    (extra / "board.yaml").write_text("apiVersion: deployc/v1\nname: board\n"
                                      "device: {soc: X, os: linux, abi: arm64-v8a}\n"
                                      "units:\n  - {name: cpu, backend: xnnpack, quantization: [fp32]}\n")
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.setenv("DEPLOYC_TARGETS_PATH", str(extra))
    r = cli("targets", "list", "--json")
    assert r.code == 0
    assert json.loads(r.out) == {
        "board": {"path": str(extra / "board.yaml"), "from": "DEPLOYC_TARGETS_PATH"},
        "android_litert": {"path": str(BUILTIN_DIR / "android_litert.yaml"), "from": "built-in"},
        "arduino_q": {"path": str(BUILTIN_DIR / "arduino_q.yaml"), "from": "built-in"},
        "snapdragon": {"path": str(BUILTIN_DIR / "snapdragon.yaml"), "from": "built-in"},
    }
    r = cli("targets", "show", "board", "--json")
    assert r.code == 0
    shown = json.loads(r.out)
    assert shown["name"] == "board" and shown["units"][0]["backend"] == "xnnpack" and shown["fallback"] == "next"


def test_targets_show_unknown(project: Path, cli) -> None:
    r = cli("targets", "show", "snapdragonn")
    assert r.code == 2
    assert r.err.splitlines()[1] == "    hint: did you mean 'snapdragon'?"


def test_targets_show_human(project: Path, cli) -> None:
    r = cli("targets", "show", "arduino_q")
    assert r.code == 0
    assert "cortex_m" in r.out and "flash=1.50 MiB" in r.out


def test_a_manifest_anywhere_finds_the_shipped_profiles(tmp_path: Path, monkeypatch, cli) -> None:
    """No targets/ folder anywhere above it, no DEPLOYC_TARGETS_PATH: the profiles inside the package."""
    monkeypatch.delenv("DEPLOYC_TARGETS_PATH", raising=False)
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "net.py").write_text("import torch\ndef build():\n    return torch.nn.Linear(4, 2)\n")
    (tmp_path / "m.yaml").write_text("apiVersion: deployc/v1\nname: anywhere\nversion: 1.0.0\n"
                                     "targets: [snapdragon, arduino_q]\nmodels:\n"
                                     "  net:\n    source: {factory: 'models.net:build'}\n"
                                     "    inputs: {x: {shape: [1, 4]}}\n")
    monkeypatch.chdir(tmp_path)
    assert not any((p / "targets").is_dir() for p in (tmp_path, *tmp_path.parents))
    r = cli("validate", "m.yaml")
    assert r.code == 0, r.err
    r = cli("targets", "list")
    assert r.code == 0
    rows = [line.split("│")[1:4] for line in r.out.splitlines() if "built-in" in line]
    assert sorted(cells[0].strip() for cells in rows) == ["android_litert", "arduino_q", "snapdragon"]


def test_a_project_profile_shadows_the_shipped_one(tmp_path: Path, monkeypatch, cli) -> None:
    (tmp_path / "targets").mkdir()
    (tmp_path / "targets" / "snapdragon.yaml").write_text(
        (BUILTIN_DIR / "snapdragon.yaml").read_text().replace("threads: 4", "threads: 6"))
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("DEPLOYC_TARGETS_PATH", raising=False)
    r = cli("targets", "list", "--json")
    found = json.loads(r.out)
    assert found["snapdragon"] == {"path": str(tmp_path / "targets" / "snapdragon.yaml"), "from": "project"}
    assert found["arduino_q"]["from"] == "built-in"
    assert load_profile("snapdragon", tmp_path, search_path(tmp_path)).profile.unit("cpu").threads == 6
