"""Apply a BuildPlan: check it still holds, build and judge its programs, build each target's assets,
write one bundle per target whose units all succeeded, and report. Takes the plan alone: whatever
it needs (the manifest's folder, asset sources, the pipeline, bundle names) is in the plan."""

from __future__ import annotations

from pathlib import Path

from deployc.apply.downstream import Downstream
from deployc.build.cache import Cache
from deployc.build.executors import Executor
from deployc.build.programs import build
from deployc.build.results import BuildReport, BundleResult
from deployc.core.errors import Diagnostic, ManifestError, PlanChanged
from deployc.core.events import EventSink, Say
from deployc.core.file_hashes import FileHashes
from deployc.plan.build_plan import BuildPlan
from deployc.plan.releases import ReleaseStatus, intact, release_status
from deployc.plan.toolchain import Toolchain


def check_inputs(plan: BuildPlan, toolchain: Toolchain, plan_file: Path, hashes: FileHashes | None = None) -> None:
    """Refuse a saved plan whose inputs changed: a file it hashed, a tool version, deployc's code.
    `hashes`: where large files' sha256 are remembered (None: nowhere)."""
    hashes = hashes or FileHashes(None)
    changed = []
    for f in plan.inputs:
        path = Path(f.path)
        if not path.is_file():
            changed.append(f"{f.path} ({f.role}) no longer exists")
        elif (now := hashes.sha256(path)) != f.sha256:
            changed.append(f"{f.path} ({f.role}) changed: sha256 {f.sha256[:12]} when planned, now {now[:12]}")
    for name, version in sorted(plan.toolchain.versions.items()):
        now = toolchain.versions.get(name, "not-installed")
        if now != version:
            changed.append(f"{name} {version} when planned, now {now}")
    for name, sha in sorted(plan.toolchain.code.items()):
        if toolchain.code.get(name) != sha:
            changed.append(f"deployc's {name} code changed since the plan was made")
    if changed:
        raise PlanChanged(f"{plan_file}: the plan no longer matches its inputs: " + "; ".join(changed)
                          + f" (make it again: deployc plan {Path(plan.manifest.folder) / plan.manifest.file} --out "
                            f"{plan_file})")


def check_releases(plan: BuildPlan, out: Path, force: bool) -> list[ReleaseStatus]:
    """Before anything is lowered: a release that exists with other content is refused unless forced."""
    statuses = release_status(plan, out)
    conflicts = [s for s in statuses if s.conflict]
    if conflicts and not force:
        m = plan.manifest
        raise ManifestError([Diagnostic(
            m.version_at,
            f"version: release {m.name} {m.version} for {s.profile} already exists in {Path(s.dir).parent} with "
            f"different content ({', '.join(s.files)})",
            "bump the version, or pass --force to overwrite it") for s in conflicts])
    return statuses


def apply(plan: BuildPlan, out: Path, cache: Cache, executor: Executor, *, force: bool, events: EventSink,
          say: Say, warn: Say, emulate: bool = True) -> BuildReport:
    """emulate: False skips the arm64 check of arm64 devices' CPU programs (reported not-run)."""
    releases = check_releases(plan, out, force)
    unchanged = {s.profile for s in releases if s.state == "unchanged"}
    kept = {t.profile for t in plan.targets if t.profile in unchanged and intact(out / t.bundle.dir,
                                                                                   out / t.bundle.archive)}
    # A unit's arm64 check (qemu, minutes for a decoder) and a target's assets (the indexes' embedding
    # processes) start as the programs they need settle, while the others still build. Assets of a target
    # whose unit then fails are not written (their cache entries are kept).
    with Downstream(plan, kept, cache, emulate, say) as downstream:
        built = build(plan, cache, executor, events, say, warn, settled=downstream.settled)
        checked, assets = downstream.finish()
    # Host reference programs (indexes' embed_with: reference) are the build's own, not units of a bundle.
    results = {label: checked[label] for label in built if label in checked}
    bundles: dict[str, BundleResult] = {}
    not_written: dict[str, str] = {}
    for t in plan.targets:
        units = [results[u.label] for u in t.units]
        failed = [u for u in units if u.status == "failed"]
        if failed:
            not_written[t.profile] = f"{len(failed)} unit(s) failed: " + ", ".join(u.unit.model for u in failed)
            continue
        folder, archive = out / t.bundle.dir, out / t.bundle.archive
        if t.profile in kept:
            bundles[t.profile] = BundleResult(dir=str(folder), archive=str(archive))
            continue
        if t.profile in unchanged:
            warn(f"release {t.profile} in {folder} no longer matches its lock (a file or the archive was changed "
                 "or removed); writing it again")
        from deployc.packaging.bundle import write_bundle

        bundles[t.profile] = write_bundle(plan, t, units, out, force, assets[t.profile])
    return BuildReport(units=list(results.values()), bundles=bundles, bundles_not_written=not_written,
                       releases=releases)
