"""Assemble one target's bundle: programs, runtime config, lock file, and a deterministic archive.

The directory is assembled beside its final place and renamed into it, so an interrupted build never
leaves a directory that looks complete. Nothing time- or machine-dependent goes in (no timestamps,
no latencies, no absolute paths): two clean builds give the same bytes.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from filelock import FileLock

import deployc
from deployc.build.results import BundleResult, CandidateResult, UnitResult, Verification
from deployc.core import layout
from deployc.core.atomic import temp_glob, write_atomic
from deployc.core.digests import file_sha256
from deployc.core.errors import Diagnostic, ManifestError
from deployc.core.facts import PROGRAM_DATA_FILE, SizeRange, TensorFacts
from deployc.core.faults import fault_point
from deployc.core.layout import LOCK_FILE, RUNTIME_BIN, RUNTIME_JSON
from deployc.core.self_test_vectors import SELF_TEST_FILE
from deployc.core.static_decoder import MASK_LAYOUT, StaticDecoderLayout
from deployc.packaging import runtime_config
from deployc.packaging.archive import write_archive
from deployc.packaging.assets import Asset
from deployc.packaging.runtime_config import normalize
from deployc.pipeline.config import PipelineConfig
from deployc.plan.build_plan import BuildPlan, TargetPlan
from deployc.plan.releases import comparison, intact

BUNDLE_SCHEMA_VERSION = 1


def _dump(data: Any) -> str:
    return json.dumps(data, indent=2, sort_keys=True) + "\n"


def _dim(entry: int | str | SizeRange, dims: dict[str, dict[str, int]]) -> dict[str, Any]:
    if isinstance(entry, int):
        return {"value": entry, "min": entry, "max": entry}
    if isinstance(entry, str):  # a manifest dim: fixed when this target's range is one size (e.g. an NPU's)
        d = dims[entry]
        return {"value": d["min"] if d["min"] == d["max"] else -1, "symbol": entry, **d}
    return {"value": -1, "min": entry.min, "max": entry.max}  # an output size that varies


def _tensors(specs: list[TensorFacts], dims: dict[str, dict[str, int]]) -> list[dict[str, Any]]:
    return [{"name": t.name, "dtype": t.dtype, "shape": [_dim(d, dims) for d in t.shape]} for t in specs]


def _verification(v: Verification) -> dict[str, Any]:
    # Rounded so that last-bit noise in a rebuild cannot change the bundle's bytes.
    m = v.metrics
    return {"status": v.status, "reason": v.reason or v.ran_on,
            "min_cosine": round(m.min_cosine, 4) if m else 0.0, "min_sqnr_db": round(m.min_sqnr_db, 1) if m else 0.0,
            "max_abs": float(f"{m.max_abs:.3g}") if m else 0.0,
            "tolerance_min_cosine": v.tolerance.min_cosine,
            "tolerance_min_sqnr_db": v.tolerance.min_sqnr_db,
            "tokens_generated": v.tokens.generated if v.tokens else 0,
            "tokens_matched": v.tokens.matched if v.tokens else 0, "tolerance_tokens": v.tolerance.tokens,
            "tokens_prompts": v.tokens.prompts if v.tokens else 0,
            "tokens_identical": v.tokens.identical if v.tokens else 0,
            **_text(v), **_task(v)}


def _task(v: Verification) -> dict[str, Any]:
    t = v.task
    return {"task_samples": t.samples if t else 0, "task_top1": round(t.top1, 4) if t and t.top1 is not None else 0.0,
            "task_topk": t.k or 0 if t else 0,
            "task_topk_overlap": round(t.topk_overlap, 4) if t and t.topk_overlap is not None else 0.0,
            "task_mean_rank_change": round(t.mean_rank_change, 3) if t and t.mean_rank_change is not None else 0.0,
            "tolerance_min_topk_overlap": v.tolerance.min_topk_overlap or 0.0}


def _text(v: Verification) -> dict[str, Any]:
    """A decoder's held-out text figures, rounded like the others; tolerances 0 when none applies."""
    t, tol = v.text, v.tolerance
    return {"text_positions": t.positions if t else 0,
            "perplexity": float(f"{t.perplexity:.4g}") if t else 0.0,
            "reference_perplexity": float(f"{t.reference_perplexity:.4g}") if t else 0.0,
            "kl": float(f"{t.kl:.3g}") if t else 0.0, "top1": round(t.top1, 4) if t else 0.0,
            "tolerance_max_perplexity_ratio": tol.max_perplexity_ratio or 0.0,
            "tolerance_max_kl": tol.max_kl or 0.0, "tolerance_min_top1": tol.min_top1 or 0.0}


def _program_entry(r: UnitResult, file: str, sha256: str, data: tuple[str, str, int] | None) -> dict[str, Any]:
    facts, verification = r.facts, r.verification
    assert facts is not None and verification is not None  # only built units are packaged
    dims = {d.name: {"min": d.min, "max": d.max, "multiple_of": d.multiple_of} for d in facts.dims}
    package = r.unit.package
    methods = []
    for name, m in sorted(facts.methods.items()):
        signature = facts.signatures.get(name)  # absent for constant methods (get_<name>): no inputs
        inputs, outputs = (signature.inputs, signature.outputs) if signature else ([], [])
        declared = package.outputs if name == "forward" else package.method_outputs.get(name, [])
        outputs = [o.model_copy(update={"name": declared[i].name}) if i < len(declared) else o
                   for i, o in enumerate(outputs)]
        if facts.format == "tflite":  # LiteRT programs take 32-bit types (litert-torch converts int64 ids)
            inputs, outputs = _narrowed(inputs), _narrowed(outputs)
        methods.append({"name": name, "inputs": _tensors(inputs, dims), "outputs": _tensors(outputs, dims),
                        "planned_memory_bytes": m.planned_memory_bytes, "operators": m.operators,
                        "delegates": m.delegates})
    requirements = [{"name": k, "value": v} for k, v in sorted(package.requirements.items())]
    return {
        "name": r.unit.model, "file": file, "sha256": sha256, "size_bytes": facts.size_bytes,
        "unit": r.unit.unit, "backend": r.unit.backend, "quantization": r.unit.quantization,
        "threads": r.unit.threads or 0, "warmup": r.unit.warmup, "methods": methods,
        "verification": _verification(verification), **({"requirements": requirements} if requirements else {}),
        **({"data_file": data[0], "data_sha256": data[1], "data_bytes": data[2]} if data else {}),
        **({"format": facts.format} if facts.format != "pte" else {}),
        **({"static_decoder": _static_decoder(facts.static_decoder)} if facts.static_decoder else {}),
        **({"chosen_by": r.unit.choice.by, "candidates": [_candidate(c) for c in r.candidates]}
           if r.unit.choice is not None else {}),
    }


def _candidate(c: CandidateResult) -> dict[str, Any]:
    m = c.metrics
    return {"scheme": c.scheme, "status": "chosen" if c.chosen else c.status, "size_bytes": c.size_bytes or 0,
            "min_cosine": round(m.min_cosine, 4) if m else 0.0, "min_sqnr_db": round(m.min_sqnr_db, 1) if m else 0.0}


def _static_decoder(layout: StaticDecoderLayout) -> dict[str, Any]:
    return {**layout.model_dump(), "mask_layout": MASK_LAYOUT}


_NARROW = {"int64": "int32", "float64": "float32"}


def _narrowed(tensors: list[Any]) -> list[Any]:
    return [t.model_copy(update={"dtype": _NARROW.get(t.dtype, t.dtype)}) for t in tensors]


def _pipeline(p: PipelineConfig) -> dict[str, Any]:
    stages = [{**s.model_dump(exclude={"params"}), "params_json": json.dumps(s.params, sort_keys=True,
                                                                             separators=(",", ":"))}
              for s in p.stages]
    return {"inputs": p.inputs, "input_types": p.input_types, "outputs": p.outputs, "stages": stages}


def _release_conflict(final: Path, files: dict[str, Any]) -> list[str] | None:
    """None when `final` is absent or holds exactly these files; else the names that differ."""
    try:
        existing = json.loads((final / LOCK_FILE).read_text())["files"]
    except (OSError, ValueError, KeyError, TypeError):
        return None if not final.exists() else [LOCK_FILE]
    if existing == files:
        return []
    return sorted(n for n in set(existing) | set(files) if existing.get(n) != files.get(n))


def write_bundle(plan: BuildPlan, target: TargetPlan, results: list[UnitResult], out_dir: Path,
                 force: bool = False, assets: list[Asset] | None = None) -> BundleResult:
    """Write the bundle; an existing release with other content is refused unless `force`."""
    final, archive = out_dir / target.bundle.dir, out_dir / target.bundle.archive
    release = final.parent
    release.mkdir(parents=True, exist_ok=True)
    locks = out_dir / layout.OUT_STATE_DIR
    locks.mkdir(exist_ok=True)
    # One writer per release target at a time; under the lock, temp dirs of killed writers are garbage.
    with FileLock(str(locks / f"{archive.name.removesuffix('.tar.gz')}.lock")):
        for stale in release.glob(f".{final.name}.*-*"):
            shutil.rmtree(stale, ignore_errors=True)
        for stale in release.glob(temp_glob(archive)):
            stale.unlink(missing_ok=True)
        return _write_locked(plan, target, results, out_dir, force, assets or [])


def _write_locked(plan: BuildPlan, target: TargetPlan, results: list[UnitResult], out_dir: Path, force: bool,
                  assets: list[Asset]) -> BundleResult:
    m = plan.manifest
    final = out_dir / target.bundle.dir
    release = final.parent
    staging = Path(tempfile.mkdtemp(dir=release, prefix=f".{target.profile}.tmp-"))
    try:
        programs = []
        data_files: dict[str, str] = {}  # sha256 -> the bundle file holding those weights
        for r in sorted(results, key=lambda r: r.unit.model):
            assert r.program is not None
            file = r.unit.package.file
            shutil.copyfile(r.program, staging / file)
            data = None
            if r.unit.package.data_file:  # weights: external; identical weights are stored once
                source = Path(r.program).parent / PROGRAM_DATA_FILE
                sha = file_sha256(source)
                if sha not in data_files:
                    data_files[sha] = r.unit.package.data_file
                    shutil.copyfile(source, staging / data_files[sha])
                data = (data_files[sha], sha, source.stat().st_size)
            programs.append(_program_entry(r, file, file_sha256(staging / file), data))
        asset_entries = []
        for r in sorted(results, key=lambda r: r.unit.model):
            vectors = Path(str(r.program)).parent / SELF_TEST_FILE
            if vectors.is_file():  # programs cached before self-tests existed have none
                assets = [*assets, Asset(f"{r.unit.model}.self_test", "self_test", layout.self_test_file(r.unit.model),
                                         vectors)]
        for a in assets:
            dest = staging / a.file
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(a.source, dest)
            asset_entries.append({"name": a.name, "file": a.file, "sha256": file_sha256(dest), "kind": a.kind})
        device = {k: v for k, v in target.device.items() if k in ("name", "soc", "os", "abi")}
        pipeline = _pipeline(target.pipeline) if target.pipeline else None
        config = normalize({
            "schema_version": runtime_config.SCHEMA_VERSION, "deployc_version": deployc.__version__,
            "bundle": {"name": m.name, "version": m.version, "target": target.target, "profile": target.profile},
            "device": device, "programs": programs, "assets": asset_entries,
            **({"pipeline": pipeline} if pipeline else {}),
        })
        (staging / RUNTIME_JSON).write_text(_dump(config))
        (staging / RUNTIME_BIN).write_bytes(runtime_config.encode(config))
        files = {p.relative_to(staging).as_posix(): {"sha256": file_sha256(p), "size": p.stat().st_size}
                 for p in sorted(staging.rglob("*")) if p.is_file()}
        lock = {
            "schema_version": BUNDLE_SCHEMA_VERSION,
            "bundle": config["bundle"],
            "files": files,
            "manifest": {"file": m.file, "sha256": m.sha256},
            "profile": {"name": target.profile, "key": target.profile_key},
            "tools": plan.toolchain.versions,
            "code": plan.toolchain.code,
            "bundle_key": target.bundle.bundle_key,
            "content_keys": target.bundle.content_keys,
            "units": {r.unit.model: {"program_key": r.unit.program_key, "unit": r.unit.unit,
                                     "steps": {s.step: s.key for s in r.unit.steps}} for r in results},
        }
        (staging / LOCK_FILE).write_text(_dump(lock))
        for p in staging.rglob("*"):
            p.chmod(0o755 if p.is_dir() else 0o644)
        staging.chmod(0o755)
        archive = out_dir / target.bundle.archive
        conflict = _release_conflict(final, files)
        if conflict and not force:
            raise ManifestError([Diagnostic(
                m.version_at,
                f"version: release {m.name} {m.version} for {target.profile} already exists in {release} with "
                f"different content ({', '.join(conflict)})",
                "bump the version, or pass --force to overwrite it")])
        fault_point("package-staged")
        if conflict == [] and intact(final, archive):
            shutil.rmtree(staging)  # the same release again: leave the published bytes untouched
            _note_comparison(plan, out_dir, target)
        else:
            write_archive(staging, target.profile, archive)
            fault_point("package-archived")
            _replace_dir(staging, final)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return BundleResult(dir=str(final), archive=str(archive))


def _note_comparison(plan: BuildPlan, out_dir: Path, target: TargetPlan) -> None:
    """Remember that these tools made the bytes of a release other tools made, so the next no-op build
    skips packaging. A release these very tools made needs no note (its lock says so)."""
    lock = json.loads((out_dir / target.bundle.dir / LOCK_FILE).read_text())
    if lock.get("tools") == plan.toolchain.versions and lock.get("code") == plan.toolchain.code:
        return
    noted = out_dir / layout.compared_file(target.bundle.archive)
    content = json.dumps(comparison(plan, out_dir / target.bundle.dir), sort_keys=True)
    if not noted.is_file() or noted.read_text() != content:
        write_atomic(noted, content)


def _replace_dir(staging: Path, final: Path) -> None:
    if final.exists():
        old = final.with_name(f".{final.name}.old-{os.getpid()}")
        os.replace(final, old)
        os.replace(staging, final)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(staging, final)
