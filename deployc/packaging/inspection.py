"""Describe and verify bundles (directories or archives) and single .pte files."""

from __future__ import annotations

import json
import tarfile
import tempfile
from pathlib import Path, PurePosixPath
from typing import Any

from deployc.errors import UserError
from deployc.fingerprint import file_sha256
from deployc.packaging.runtime_config import ConfigError, decode, normalize

LOCK_FILE = "bundle.lock.json"


def unsafe_members(tar: tarfile.TarFile) -> list[str]:
    """Members an extraction must refuse: absolute paths, '..', links, devices."""
    bad = []
    for m in tar.getmembers():
        parts = PurePosixPath(m.name).parts
        if m.name.startswith("/") or ".." in parts or not (m.isfile() or m.isdir()):
            bad.append(m.name)
    return bad


def verify_bundle(folder: Path) -> list[str]:
    """Every way `folder` differs from its lock file; empty when it matches."""
    lock_path = folder / LOCK_FILE
    if not lock_path.is_file():
        return [f"{LOCK_FILE} is missing"]
    try:
        lock = json.loads(lock_path.read_text())
        files = lock["files"]
    except (json.JSONDecodeError, KeyError, TypeError) as exc:
        return [f"{LOCK_FILE} is unreadable: {exc}"]
    problems = []
    present = {p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file() or p.is_symlink()}
    for name in sorted(present - set(files) - {LOCK_FILE}):
        problems.append(f"{name}: not listed in the lock")
    for name, info in sorted(files.items()):
        p = folder / name
        if not p.is_file() or p.is_symlink():
            problems.append(f"{name}: missing")
        elif p.stat().st_size != info["size"]:
            problems.append(f"{name}: size {p.stat().st_size}, lock says {info['size']}")
        elif file_sha256(p) != info["sha256"]:
            problems.append(f"{name}: sha256 differs from the lock")
    if not problems and (folder / "runtime.bin").is_file():
        try:
            binary = decode((folder / "runtime.bin").read_bytes())
            if binary != normalize(json.loads((folder / "runtime.json").read_text())):
                problems.append("runtime.bin and runtime.json disagree")
        except (ConfigError, ValueError) as exc:
            problems.append(f"runtime.bin: {exc}")
    return problems


def describe_bundle(folder: Path) -> dict[str, Any]:
    config = json.loads((folder / "runtime.json").read_text())
    lock = json.loads((folder / LOCK_FILE).read_text())
    sizes = {name: info["size"] for name, info in lock["files"].items()}
    return {"kind": "bundle", "path": str(folder), "bundle": config["bundle"], "device": config["device"],
            "programs": config["programs"], "assets": config.get("assets", []), "pipeline": config.get("pipeline"),
            "tools": lock["tools"], "sizes": sizes, "total_bytes": sum(sizes.values())}


def describe_pte(path: Path) -> dict[str, Any]:
    from executorch.exir._serialize._program import deserialize_pte_binary

    data = path.read_bytes()
    try:
        program = deserialize_pte_binary(data).program
    except Exception as exc:  # a foreign or damaged file: say so, never a traceback
        raise UserError.at(path, f"not a readable ExecuTorch program: {type(exc).__name__}: {exc}") from None
    methods = []
    for plan in program.execution_plan:
        methods.append({
            "name": plan.name,
            "inputs": len(plan.inputs), "outputs": len(plan.outputs),
            "planned_memory_bytes": int(sum(plan.non_const_buffer_sizes)),
            "delegates": sorted(d.id for d in plan.delegates),
            "operators": sorted({f"{o.name}.{o.overload}" if o.overload else o.name for o in plan.operators}),
        })
    constant = sum(len(b.storage) for b in program.constant_buffer)
    segments = sum(s.size for s in program.segments)
    return {"kind": "pte", "path": str(path), "size_bytes": len(data), "methods": methods,
            "constant_bytes": constant, "segment_bytes": segments}


def open_bundle(path: Path, scratch: tempfile.TemporaryDirectory[str]) -> Path:
    """A bundle directory for `path`: the directory itself, or an archive safely extracted."""
    if path.is_dir():
        return path
    if not tarfile.is_tarfile(path):
        raise UserError.at(path, "not a bundle directory, a bundle archive or a .pte file")
    with tarfile.open(path) as tar:
        bad = unsafe_members(tar)
        if bad:
            raise UserError.at(path, f"archive has unsafe members (absolute, '..', links or devices): "
                                     f"{', '.join(bad[:5])}")
        tar.extractall(scratch.name, filter="data")
    tops = [p for p in Path(scratch.name).iterdir() if p.is_dir()]
    if len(tops) != 1:
        raise UserError.at(path, "archive must hold exactly one bundle directory")
    return tops[0]
