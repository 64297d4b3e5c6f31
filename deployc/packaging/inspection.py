"""Describe and verify bundles (directories or archives) and single .pte files."""

from __future__ import annotations

import json
import tarfile
import tempfile
from pathlib import Path
from typing import Any

from deployc.core.digests import file_sha256
from deployc.core.errors import UserError
from deployc.core.layout import LOCK_FILE, RUNTIME_BIN, RUNTIME_JSON
from deployc.core.pte import data_bytes, method_facts, read_program
from deployc.core.records import Frozen
from deployc.packaging.archive import read_archive
from deployc.packaging.program_bytes import byte_kinds
from deployc.packaging.runtime_config import ConfigError, decode, normalize


class BundleCheck(Frozen):
    lock_readable: bool  # without a readable lock nothing else can be trusted, nor described
    problems: list[str]  # every way the bundle differs from its lock; empty when it matches

    @property
    def ok(self) -> bool:
        return not self.problems


def check_bundle(folder: Path) -> BundleCheck:
    """Every way `folder` differs from its lock file."""
    lock_path = folder / LOCK_FILE
    if not lock_path.is_file():
        return BundleCheck(lock_readable=False, problems=[f"{LOCK_FILE} is missing"])
    try:
        lock = json.loads(lock_path.read_text())
        files = lock["files"]
    except (json.JSONDecodeError, KeyError, TypeError) as exc:
        return BundleCheck(lock_readable=False, problems=[f"{LOCK_FILE} is unreadable: {exc}"])
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
    if not problems and (folder / RUNTIME_BIN).is_file():
        try:
            binary = decode((folder / RUNTIME_BIN).read_bytes())
            if binary != normalize(json.loads((folder / RUNTIME_JSON).read_text())):
                problems.append(f"{RUNTIME_BIN} and {RUNTIME_JSON} disagree")
        except (ConfigError, ValueError) as exc:
            problems.append(f"{RUNTIME_BIN}: {exc}")
    return BundleCheck(lock_readable=True, problems=problems)


def verify_bundle(folder: Path) -> list[str]:
    """Every way `folder` differs from its lock file; empty when it matches."""
    return check_bundle(folder).problems


def describe_bundle(folder: Path) -> dict[str, Any]:
    config = json.loads((folder / RUNTIME_JSON).read_text())
    lock = json.loads((folder / LOCK_FILE).read_text())
    sizes = {name: info["size"] for name, info in lock["files"].items()}
    kinds = {}
    for p in config["programs"]:
        f = folder / p["file"]
        if not f.is_file() or f.stat().st_size != lock["files"].get(p["file"], {}).get("size"):
            continue  # missing or changed: the lock check reports it
        if p.get("format", "pte") != "pte":
            continue  # a LiteRT flatbuffer: its ops and tensors are in the config; no ExecuTorch breakdown
        data = f.read_bytes()
        try:
            kinds[p["name"]] = byte_kinds(read_program(data), data).model_dump()
        except Exception:  # a damaged program: the lock check (sha256) reports it; nothing to break down
            continue
    return {"kind": "bundle", "path": str(folder), "bundle": config["bundle"], "device": config["device"],
            "programs": config["programs"], "assets": config.get("assets", []), "pipeline": config.get("pipeline"),
            "tools": lock["tools"], "sizes": sizes, "total_bytes": sum(sizes.values()), "bytes_by_kind": kinds,
            "indexes": _indexes(folder, config)}


def _indexes(folder: Path, config: dict[str, Any]) -> list[dict[str, Any]]:
    """What each vector index says of how it was embedded and judged (its JSON, chunks left out)."""
    out = []
    for a in config.get("assets", []):
        f = folder / a["file"]
        if a["kind"] != "vector_index" or not f.is_file():
            continue
        try:
            doc = json.loads(f.read_text())
        except (ValueError, UnicodeDecodeError):  # a damaged file: the lock check (sha256) reports it
            continue
        out.append({"name": a["name"], **{k: doc.get(k) for k in ("model", "count", "dim", "embedded_with",
                                                                  "agreement", "retrieval")}})
    return out


def describe_pte(path: Path) -> dict[str, Any]:
    data = path.read_bytes()
    try:
        program = read_program(data)
    except Exception as exc:  # a foreign or damaged file: say so, never a traceback
        raise UserError.at(path, f"not a readable ExecuTorch program: {type(exc).__name__}: {exc}") from None
    methods = [{"name": name, **m.model_dump()} for name, m in method_facts(program).items()]
    constant, segments = data_bytes(program)
    return {"kind": "pte", "path": str(path), "size_bytes": len(data), "methods": methods,
            "constant_bytes": constant, "segment_bytes": segments,
            "bytes_by_kind": byte_kinds(program, data).model_dump()}


def open_bundle(path: Path, scratch: Path) -> Path:
    """A bundle directory for `path`: the directory itself, or an archive checked whole and extracted into a
    new folder under `scratch` (the caller's to remove)."""
    if path.is_dir():
        return path
    with path.open("rb") as f:
        head = f.read(512)
    if not (head.startswith(b"\x1f\x8b") or tarfile.is_tarfile(path)):
        raise UserError.at(path, "not a bundle directory, a bundle archive (.tar.gz) or a .pte file")
    return read_archive(path, Path(tempfile.mkdtemp(dir=scratch)))
