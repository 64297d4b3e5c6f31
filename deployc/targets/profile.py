"""Target profile schema, lookup through the search path, and `extends:` inheritance."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, ValidationError

from deployc.core.diagnostics import closest, diagnostics_from
from deployc.core.errors import Diagnostic, Location, ProfileError
from deployc.core.quantization import SchemeName
from deployc.core.records import ApiVersion, ByteSize, Frozen, Identifier
from deployc.core.yaml_io import Document, load_file
from deployc.targets.backends import BACKENDS, BackendName

# The arm64 check's CPU when a profile names none: Armv8.2-A with dot product and fp16 arithmetic, the
# common phone core of recent years.
DEFAULT_EMULATED_CPU = "cortex-a76"


class Device(Frozen):
    soc: str = Field(description="system on chip, e.g. SM8650")
    os: str = Field(description="android, linux, zephyr, ...")
    abi: str = Field(description="arm64-v8a, armv8m.main, ...")
    name: str = ""
    notes: str = ""
    emulated_cpu: str = Field(default="", description=(
        "arm64 devices: the CPU model the arm64 check emulates (a `qemu-aarch64 -cpu` model, with options), "
        "e.g. cortex-a53; default cortex-a76"))


class Budgets(Frozen):
    ram: ByteSize | None = Field(default=None, description="planned activation memory + weights loaded at run time")
    storage: ByteSize | None = Field(default=None, description="program files on disk")
    flash: ByteSize | None = Field(default=None, description="MCU flash for program and weights")
    sram: ByteSize | None = Field(default=None, description="MCU SRAM for planned activations")


class Unit(Frozen):
    name: Identifier
    backend: BackendName  # built from the registry's keys
    description: str = ""
    device: Device | None = Field(default=None, description="a separate processor on the same board (an MCU)")
    options: dict[str, Any] = Field(default_factory=dict, description="backend-specific options")
    quantization: list[SchemeName] = Field(min_length=1, description="schemes this unit accepts, preferred first")
    threads: Annotated[int, Field(ge=1, le=256)] | None = None
    warmup: Annotated[int, Field(ge=0, le=100)] = 1
    budgets: Budgets | None = Field(default=None, description="per-unit budgets (an MCU's flash and SRAM)")
    int8_only: bool = Field(default=False, description="the unit runs int8 kernels only: a program with operators "
                            "left outside them (float or portable compute) fails unless the model allows it "
                            "(verify.allow_float_ops)")


class Profile(Frozen):
    api_version: ApiVersion = Field(alias="apiVersion")
    name: str = Field(pattern=r"^[a-z0-9]+([_-][a-z0-9]+)*$")
    description: str = ""
    extends: str | None = Field(default=None, description="parent profile: a name or a relative path")
    device: Device
    units: list[Unit] = Field(min_length=1, description="compute units in priority order")
    budgets: Budgets = Field(default_factory=Budgets)
    fallback: Literal["next", "error"] = Field(
        default="next", description="when a unit's backend cannot build here: try the next unit, or fail")

    def unit(self, name: str) -> Unit | None:
        return next((u for u in self.units if u.name == name), None)


@dataclass(frozen=True)
class LoadedProfile:
    profile: Profile
    doc: Document  # merged document; locations point into whichever file gave each value
    files: tuple[Path, ...]  # the profile file first, then each ancestor


BUILTIN_DIR = Path(__file__).resolve().parent.parent / "builtin_targets"

Origin = Literal["project", "DEPLOYC_TARGETS_PATH", "built-in"]


def search_dirs(start: Path, env: Mapping[str, str] | None = None) -> list[tuple[Path, Origin]]:
    """Where profiles are looked up, first match wins: `targets/` in `start` and each of its ancestors
    (nearest first), then each DEPLOYC_TARGETS_PATH entry, then the profiles shipped with deployc."""
    env = os.environ if env is None else env
    dirs: list[tuple[Path, Origin]] = []
    for folder in (start.resolve(), *start.resolve().parents):
        if (folder / "targets").is_dir():
            dirs.append((folder / "targets", "project"))
    for entry in env.get("DEPLOYC_TARGETS_PATH", "").split(":"):
        if entry:
            dirs.append((Path(entry), "DEPLOYC_TARGETS_PATH"))
    dirs.append((BUILTIN_DIR, "built-in"))
    return dirs


def search_path(start: Path, env: Mapping[str, str] | None = None) -> list[Path]:
    return [d for d, _ in search_dirs(start, env)]


def profile_origins(start: Path, env: Mapping[str, str] | None = None) -> dict[str, tuple[Path, Origin]]:
    """Every profile name on the search path -> (the file that wins, where it came from)."""
    found: dict[str, tuple[Path, Origin]] = {}
    for d, origin in search_dirs(start, env):
        for f in sorted(d.glob("*.yaml")) if d.is_dir() else []:
            found.setdefault(f.stem, (f, origin))
    return found


def _is_path(ref: str) -> bool:
    return "/" in ref or ref.endswith((".yaml", ".yml"))


def available_profiles(dirs: Sequence[Path]) -> dict[str, Path]:
    found: dict[str, Path] = {}
    for d in dirs:
        for f in sorted(d.glob("*.yaml")) if d.is_dir() else []:
            found.setdefault(f.stem, f)
    return found


def find_profile(ref: str, relative_to: Path, dirs: Sequence[Path]) -> Path | None:
    if _is_path(ref):
        p = (relative_to / ref)
        return p if p.is_file() else None
    return available_profiles(dirs).get(ref)


def _deep_merge(parent: Any, child: Any) -> Any:
    if isinstance(parent, dict) and isinstance(child, dict):
        out = dict(parent)
        for k, v in child.items():
            out[k] = _deep_merge(parent[k], v) if k in parent else v
        return out
    return child


def _check(p: Profile, doc: Document) -> list[Diagnostic]:
    out: list[Diagnostic] = []
    names: set[str] = set()
    for i, u in enumerate(p.units):
        if u.name in names:
            out.append(Diagnostic(doc.locate(("units", i, "name")),
                                  f"units[{i}].name: unit '{u.name}' is defined twice"))
        names.add(u.name)
        backend = BACKENDS[u.backend]
        for option, message, hint in backend.check_options(u.options):
            out.append(Diagnostic(doc.locate(("units", i, "options", option)),
                                  f"units[{i}].options.{option}: {message}", hint))
        for j, s in enumerate(u.quantization):
            if s not in backend.schemes:
                out.append(Diagnostic(
                    doc.locate(("units", i, "quantization", j)),
                    f"units[{i}].quantization[{j}]: backend '{u.backend}' cannot build scheme '{s}'",
                    f"'{u.backend}' supports: {', '.join(sorted(backend.schemes))}"))
    return out


def load_profile(ref: str, relative_to: Path, dirs: Sequence[Path],
                 where: Diagnostic | None = None, _chain: tuple[Path, ...] = ()) -> LoadedProfile:
    """Load profile `ref` (a name or a path relative to `relative_to`), following `extends:`."""
    path = find_profile(ref, relative_to, dirs)
    if path is None:
        known = available_profiles(dirs)
        what = f"profile file '{ref}' not found (relative to {relative_to})" if _is_path(ref) else \
            f"unknown target profile '{ref}'"
        hint = closest(ref, known) or f"known profiles: {', '.join(known)}"
        loc = where.location if where else Location(str(relative_to))
        prefix = f"{where.message}: " if where and where.message else ""
        raise ProfileError([Diagnostic(loc, prefix + what, hint)])
    path = path.resolve()
    if path in _chain:
        cycle = " -> ".join(p.name for p in (*_chain, path))
        loc = where.location if where else Location(str(path))
        raise ProfileError([Diagnostic(loc, f"extends: cycle {cycle}")])
    doc = load_file(path)
    parent_ref = doc.data.get("extends")
    files: tuple[Path, ...] = (path,)
    if isinstance(parent_ref, str):
        here = Diagnostic(doc.locate(("extends",)), "extends")
        parent = load_profile(parent_ref, path.parent, dirs, here, (*_chain, path))
        merged_data = _deep_merge(parent.doc.data, doc.data)
        doc = Document(path, merged_data, {**parent.doc.values, **doc.values}, {**parent.doc.keys, **doc.keys})
        files = (path, *parent.files)
    try:
        profile = Profile.model_validate(doc.data)
    except ValidationError as exc:
        raise ProfileError(diagnostics_from(exc, doc, Profile)) from None
    problems = _check(profile, doc)
    if not _is_path(ref) and profile.name != ref:
        problems.append(Diagnostic(doc.locate(("name",)),
                                   f"name: profile file {path.name} declares name '{profile.name}', expected '{ref}'"))
    if problems:
        raise ProfileError(problems)
    return LoadedProfile(profile, doc, files)
