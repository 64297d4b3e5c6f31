"""What a plan would do to the releases already in an output directory, known before anything is
lowered: each target's bundle is new, unchanged, changed (an immutable release would conflict), or
made by other tools (only the bytes after the build can tell). Reads lock files; pure otherwise."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

from deployc.core import layout
from deployc.core.digests import file_sha256
from deployc.core.records import Frozen
from deployc.plan.build_plan import BuildPlan, TargetPlan

State = Literal["new", "unchanged", "changed", "tools-changed", "unknown"]

EXPLAIN: dict[str, str] = {
    "new": "no release yet",
    "unchanged": "the release exists with this content",
    "changed": "the release exists with other content: building it needs a new version or --force",
    "tools-changed": "the release exists, made by other tool versions or deployc code; the build compares the bytes",
    "unknown": "the release exists but its lock file records no bundle key (made by an older deployc); the build "
               "compares the bytes",
}


class ReleaseStatus(Frozen):
    target: str
    profile: str
    state: State
    dir: str  # the bundle directory this status is about
    files: list[str] = []  # the files that would change ("changed" only)

    @property
    def conflict(self) -> bool:
        return self.state == "changed"


def _lock(folder: Path) -> dict[str, Any] | None:
    try:
        lock = json.loads((folder / layout.LOCK_FILE).read_text())
    except (OSError, ValueError):
        return None
    return lock if isinstance(lock, dict) else None


def _predicted_changes(target: TargetPlan, lock: dict[str, Any]) -> list[str]:
    old: dict[str, str] = lock.get("content_keys") or {}
    new = target.bundle.content_keys
    files = {f for f in set(old) | set(new) if old.get(f) != new.get(f)}
    return sorted(files | {layout.RUNTIME_BIN, layout.RUNTIME_JSON})  # they list every file's sha256


def release_status(plan: BuildPlan, out_dir: Path) -> list[ReleaseStatus]:
    return [_status(plan, t, out_dir) for t in plan.targets]


def comparison(plan: BuildPlan, folder: Path) -> dict[str, Any]:
    """What `compared_file` records: this lock, found byte-identical to a build with these tools."""
    return {"lock_sha256": file_sha256(folder / layout.LOCK_FILE), "tools": plan.toolchain.versions,
            "code": plan.toolchain.code}


def _compared(plan: BuildPlan, t: TargetPlan, out_dir: Path) -> bool:
    try:
        noted = json.loads((out_dir / layout.compared_file(t.bundle.archive)).read_text())
        return bool(noted == comparison(plan, out_dir / t.bundle.dir))
    except (OSError, ValueError):
        return False


def _status(plan: BuildPlan, t: TargetPlan, out_dir: Path) -> ReleaseStatus:
    folder = out_dir / t.bundle.dir
    status = ReleaseStatus(target=t.target, profile=t.profile, state="new", dir=str(folder))
    if not folder.exists():
        return status
    lock = _lock(folder)
    if lock is None or "bundle_key" not in lock:
        return status.model_copy(update={"state": "unknown"})
    if lock["bundle_key"] != t.bundle.bundle_key:
        return status.model_copy(update={"state": "changed", "files": _predicted_changes(t, lock)})
    tools_changed = lock.get("tools") != plan.toolchain.versions or lock.get("code") != plan.toolchain.code
    # A release rebuilt once with these tools, same bytes, stays as published (its lock names the tools
    # that made it): later builds with them need not compare again.
    if tools_changed and not _compared(plan, t, out_dir):
        return status.model_copy(update={"state": "tools-changed"})
    return status.model_copy(update={"state": "unchanged"})


def intact(folder: Path, archive: Path) -> bool:
    """The published release still holds exactly the files its lock lists, byte for byte, and its archive:
    an unchanged release needs no packaging (a no-op rebuild then never stages, encodes or copies)."""
    lock = _lock(folder)
    if lock is None or not archive.is_file() or not isinstance(lock.get("files"), dict):
        return False
    on_disk = {p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()} - {layout.LOCK_FILE}
    if on_disk != set(lock["files"]):
        return False
    return all((folder / name).stat().st_size == info.get("size") and file_sha256(folder / name) == info.get("sha256")
               for name, info in lock["files"].items())
