"""What the HTML report shows, gathered from a bundle (its runtime config, lock and programs) or from a
build (its report and the bundles it wrote): plain rows for packaging/html_report.py to draw."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from deployc.core.layout import RUNTIME_JSON
from deployc.packaging.html_report import ProgramRow, TargetSection

if TYPE_CHECKING:
    from deployc.build.results import BuildReport, UnitResult
    from deployc.core.program_profile import ProgramProfile


def _verification_words(v: dict[str, Any]) -> str:
    if v.get("status") == "not-run":
        return f"not-run: {v.get('reason', '')}"
    words = f"{v.get('status')} (cos {v.get('min_cosine', 0.0):.4f}, {v.get('min_sqnr_db', 0.0):.1f} dB)"
    if v.get("task_samples"):
        words += (f", top-1 {v['task_top1']:.0%} of {v['task_samples']}" if not v.get("task_topk") else
                  f", top-{v['task_topk']} overlap {v['task_topk_overlap']:.0%} of {v['task_samples']}")
    if v.get("text_positions"):
        words += f", ppl {v['perplexity']:.3g} (fp32 {v['reference_perplexity']:.3g}), top-1 {v['top1']:.0%}"
    if v.get("reason") and v.get("status") == "passed":
        words += f" ({v['reason']})"
    return words


def section_from_bundle(folder: Path, profiles: list[ProgramProfile] | None = None) -> TargetSection:
    from deployc.packaging.inspection import describe_bundle

    info = describe_bundle(folder)
    config = json.loads((folder / RUNTIME_JSON).read_text())
    profiled = {p.program: p for p in profiles or [] if p.status == "profiled"}
    rows = []
    for p in config["programs"]:
        planned = max((m.get("planned_memory_bytes", 0) for m in p.get("methods", [])), default=0)
        prof = profiled.get(p["name"])
        rows.append(ProgramRow(
            model=p["name"], unit=p["unit"], backend=p["backend"], quantization=p["quantization"], status="packaged",
            size_bytes=p["size_bytes"], planned_bytes=planned, verification=_verification_words(p["verification"]),
            bytes_by_kind=info["bytes_by_kind"].get(p["name"], {}), chosen_by=p.get("chosen_by", ""),
            candidates=list(p.get("candidates", [])),
            operators=[o.model_dump() for o in prof.operators] if prof else [],
            profiled_on=prof.ran_on if prof else "",
            latency_ms=prof.call_ms if prof else None))
    return TargetSection(target=config["bundle"]["target"], device=config["device"], bundle=f"bundle {folder}",
                         programs=rows, pipeline=config.get("pipeline"))


def _failed_row(u: UnitResult) -> ProgramRow:
    f = u.facts
    return ProgramRow(model=u.unit.model, unit=u.unit.unit, backend=u.unit.backend, quantization=u.unit.quantization,
                      status=u.status, size_bytes=f.size_bytes if f else 0,
                      planned_bytes=f.planned_memory_bytes if f else 0,
                      verification=u.verification.status if u.verification else "-",
                      failure=f"at {u.failure.step}: {u.failure.error}" if u.failure else "")


def sections_from_build(report: BuildReport) -> list[TargetSection]:
    """One section per target: its bundle's, with what only the build knows (status, host latency, each
    candidate's latency); a target without a bundle shows its units and why."""
    by_target: dict[str, list[UnitResult]] = {}
    for u in report.units:
        by_target.setdefault(u.unit.target, []).append(u)
    sections = []
    for target, units in by_target.items():
        bundle = report.bundles.get(target)
        if bundle is None:
            why = report.bundles_not_written.get(target, "no bundle written")
            sections.append(TargetSection(target=target, device={}, bundle=f"no bundle: {why}",
                                          programs=[_failed_row(u) for u in units]))
            continue
        section = section_from_bundle(Path(bundle.dir))
        results = {u.unit.model: u for u in units}
        for row in section.programs:
            built = results.get(row.model)
            if built is None:
                continue
            row.status = built.status
            row.latency_ms = built.facts.measurement.latency_ms if built.facts else None
            latency = {c.scheme: c.latency_ms for c in built.candidates}
            row.candidates = [{**c, "latency_ms": latency.get(c["scheme"])} for c in row.candidates]
        sections.append(section)
    return sections
