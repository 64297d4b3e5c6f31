"""How results look to people: the tables and lines the commands print through the Console.
(--json output is the data itself and needs no view.)"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.table import Table

from deployc.cli.console import Console
from deployc.core.sizes import format_size

if TYPE_CHECKING:
    from deployc.build.results import Arm64Check, BuildReport, UnitResult
    from deployc.core.facts import TaskMetrics
    from deployc.core.program_profile import ProgramProfile
    from deployc.plan.build_plan import BuildPlan, UnitPlan, Verify
    from deployc.plan.releases import ReleaseStatus
    from deployc.targets.profile import LoadedProfile, Origin


def text_figures(perplexity: float, reference: float, kl: float, top1: float) -> str:
    """A decoder on held-out text, e.g. `ppl 12.3 (fp32 12.1), KL 0.004, top-1 97%`."""
    return f"ppl {perplexity:.3g} (fp32 {reference:.3g}), KL {kl:.2g}, top-1 {top1:.0%}"


def task_figures(task: TaskMetrics) -> str:
    """A program on the task samples, e.g. `top-1 98% of 50` or `top-5 overlap 96% (rank moved 0.12) of 50`."""
    if task.top1 is not None:
        return f"top-1 {task.top1:.0%} of {task.samples}"
    moved = task.mean_rank_change or 0.0
    return f"top-{task.k} overlap {task.topk_overlap or 0:.0%} (rank moved {moved:.2f}) of {task.samples}"


def token_figures(matched: int, generated: int, prompts: int, identical: int) -> str:
    """Greedy parity, e.g. `tokens 32/32 on 5 of 8 prompts (worst 3)`: prompts whose every generated token
    is eager's, and the leading tokens that are on the worst prompt."""
    if prompts <= 1 or identical == prompts:
        return f"tokens {matched}/{generated}" + (f" on {prompts} prompts" if prompts > 1 else "")
    return f"tokens {generated}/{generated} on {identical} of {prompts} prompts (worst {matched})"


def choice_words(u: UnitPlan) -> str:
    """A unit's scheme, or its choice rule when it chooses by measurement."""
    if u.choice is None:
        return u.quantization
    return f"{'auto' if u.choice.auto else 'choose'} by {u.choice.by}"


def _choice_lines(u: UnitPlan, status: Mapping[str, str]) -> list[str]:
    if u.choice is None:
        return []
    rule = ("the first that meets every tolerance" if u.choice.by == "size"
            else "all verified, the fastest on this host that meets every tolerance")
    tried = ", ".join(f"{c.quantization} [{status.get(c.program_key, 'to build')}]" for c in (u, *u.candidates))
    where = f"  {u.model} on {u.target}/{u.unit}"
    lines = [f"{where}: candidates by {u.choice.by}, {rule}: {tried}"]
    untaken = [p.scheme for p in u.choice.passed_over if p.reason.startswith("accepts ")]
    if untaken:
        lines.append(f"{where}: passed over {', '.join(untaken)}: the unit does not take them")
    lines += [f"{where}: passed over {p.scheme}: {p.reason}" for p in u.choice.passed_over
              if not p.reason.startswith("accepts ")]
    return lines


def render_plan(console: Console, build_plan: BuildPlan, status: Mapping[str, str],
                releases: list[ReleaseStatus]) -> None:
    """The units as a table, then one section of lines each: programs, derived inputs, how decoders are
    judged, static forms, checks beyond this host's runtime, budgets, indexes, toolchains, releases."""
    m = build_plan.manifest
    console.result(f"{m.name} {m.version}: {len(build_plan.units())} unit(s), "
                   f"{len(build_plan.programs())} distinct program(s)")
    _plan_units(console, build_plan, status)
    for key, u in build_plan.programs().items():
        console.result(f"  program {key[:12]} ({u.model}, {u.backend}): {u.quantize.description}")
    _plan_derived(console, build_plan)
    _plan_text_judging(console, build_plan)
    _plan_static_forms(console, build_plan)
    _plan_calibration_texts(console, build_plan)
    _plan_beyond_this_runtime(console, build_plan)
    _plan_budget_estimates(console, build_plan)
    _plan_indexes(console, build_plan, status)
    _plan_toolchains(console, build_plan)
    _plan_releases(console, releases)


def _dims_words(u: UnitPlan) -> str:
    return ", ".join(f"{d.name}={d.min}" if d.min == d.max else f"{d.name}={d.min}..{d.max}"
                     + (f" (x{d.multiple_of})" if d.multiple_of > 1 else "")
                     for d in u.export.dims) or "static"


def _plan_units(console: Console, build_plan: BuildPlan, status: Mapping[str, str]) -> None:
    """Each unit's row; then the units passed over, the schemes of each choice, the units to fall back to."""
    table = Table("model", "target", "unit", "backend", "partitioners", "quantization", "dims", "cache", "program")
    skipped: list[str] = []
    for u in build_plan.units():
        table.add_row(u.model, u.target, u.unit, u.backend, " > ".join(u.lower.partitioners) or "-",
                      choice_words(u), _dims_words(u), status[u.program_key], u.program_key[:12])
        skipped.extend(f"  {u.model} on {u.target}: skipped {s.unit} ({s.backend}): {s.reason}" for s in u.skipped)
        for group in (u, *u.fallbacks):
            skipped.extend(_choice_lines(group, status))
        if u.fallbacks:
            skipped.append(f"  {u.model} on {u.target}: if {u.unit} ({u.backend}) cannot build it: "
                           + ", then ".join(f"{f.unit} ({f.backend}" + (f", {f.quantization})" if f.quantization
                                                                         != u.quantization else ")")
                                            for f in u.fallbacks))
    console.table(table)
    for line in skipped:
        console.result(line)


def _plan_derived(console: Console, build_plan: BuildPlan) -> None:
    """What the plan derived from a Hugging Face directory's config.json or a GGUF file, once a model."""
    shown: set[str] = set()
    for u in build_plan.units():
        if u.load.derived and u.model not in shown:
            shown.add(u.model)
            tensors = ", ".join(f"{i.name} {i.dtype}[{', '.join(map(str, i.shape))}]" for i in u.export.inputs)
            c = u.lower.constants
            generation = (f"; KV cache of {u.load.context} positions, bos {c.get('bos_id', '-')}, eos "
                          f"{c.get('eos_ids', [])}" if u.load.context else "")
            g = u.load.gguf
            where = (f"{u.load.huggingface}/config.json" if g is None else
                     f"{g if isinstance(g, str) else f'{g.file} (package {g.package})'}'s metadata")
            console.result(f"  {u.model}: {', '.join(u.load.derived)} from {where} (task {u.load.task}): "
                           f"{tensors}{generation}")


def _plan_text_judging(console: Console, build_plan: BuildPlan) -> None:
    """How each decoder is judged: held-out text and greedy parity, once a model."""
    judged: set[str] = set()
    for u in build_plan.units():
        if u.verify.generate and u.model not in judged:
            judged.add(u.model)
            held = u.export.text
            text = (f"on {held.file} in {held.tokenizer}: {len(held.windows)} windows of {len(held.windows[0]) - 1} "
                    f"tokens (perplexity, KL, top-1 vs eager fp32), greedy parity from {len(held.prompts)} of its "
                    "prompts" if held else f"greedy parity from seeded prompts only: {u.export.text_reason}")
            console.result(f"  {u.model}: verified {text}, {u.verify.generate} tokens each")


def _stretches(u: UnitPlan) -> str:
    cal = u.quantize.text
    return (f"{len(cal.sequences)} stretches of {len(cal.sequences[0])} tokens of {cal.file}" if cal
            else "seeded token ids")


def _plan_calibration_texts(console: Console, build_plan: BuildPlan) -> None:
    """What a calibrated decoder outside the static form is calibrated on (a static form says it in its line)."""
    for u in build_plan.units():
        if u.quantize.text is not None and u.export.static is None:
            console.result(f"  {u.model} on {u.target} ({u.unit}): calibrated on {_stretches(u)}, each as a prompt")


def _plan_static_forms(console: Console, build_plan: BuildPlan) -> None:
    from deployc.plan.heldout import PROMPTS
    from deployc.plan.static_checks import verification_calls

    for u in build_plan.units():
        form = u.export.static
        if form is not None:
            calibrated = (f"; calibrated on {_stretches(u)} through the same driver"
                          if u.quantize.recipe.method == "pt2e" else "")
            decode = ("each new token through it (one graph, the weights once)" if form.decode == "prefill"
                      else "a decode method of 1")
            first = (f"; position 0 (bos, token {form.prefix_token}) computed in float at build time, each call "
                     "from position 1" if form.prefix_token is not None else "")
            calls = verification_calls(u)
            checked = ("; verification: " + ", ".join(f"{n} {name} calls" for name, n in calls.items() if n)
                       if calls else "")
            v = u.verify
            if v.estimate_s is not None and v.budget_s is not None:
                fewer = f", {v.prompts} of {PROMPTS} greedy prompts to fit" if v.prompts < PROMPTS else ""
                over = (": over budget even so (the held-out windows and the points are always judged)"
                        if v.estimate_s > v.budget_s else "")
                checked += (f", about {v.estimate_s:.0f} s on the emulator by the plan's estimate (budget "
                            f"{v.budget_s:.0f} s){fewer}{over}")
            console.result(f"  {u.model} on {u.target} ({u.unit}): static form: a prefill method of {form.prefill} "
                           f"tokens a call and {decode}, KV caches of {form.context} positions in and out{first}"
                           f"{calibrated}{checked}")


def _plan_beyond_this_runtime(console: Console, build_plan: BuildPlan) -> None:
    """Verification beyond this host's runtime: arm64 kernels under qemu, a backend's reference kernels."""
    for u in build_plan.units():
        v = u.verify
        if v.arm64_cpu:
            console.result(f"  {u.model} on {u.target} ({u.unit}): also verified on arm64 kernels (ExecuTorch's "
                           f"aarch64 runtime under qemu-aarch64 -cpu {v.arm64_cpu})"
                           f"{_arm64_points(v, u.export.text is not None)}")
        if v.host_reference:
            console.result(f"  {u.model} on {u.target} ({u.unit}): verified on {v.host_reference}"
                           + ("; int8 kernels only (float operators fail it)" if v.int8_only else ""))


def _arm64_points(v: Verify, held_out: bool) -> str:
    """What a decoder's arm64 check runs within its budget, in words ("" when it runs every point)."""
    if v.arm64_points is None or v.estimate_s is None or v.budget_s is None:
        return ""
    left_out = [p for p in v.points if p not in v.arm64_points]
    run = ", ".join(_point(p) for p in v.arm64_points) + (" and the held-out positions" if held_out else "")
    return (f" at {run}, about {v.estimate_s:.0f} s by the plan's estimate (budget "
            f"{v.budget_s:.0f} s)" + (f"; {', '.join(_point(p) for p in left_out)} left out to fit it" if left_out
                                      else ""))


def _point(point: dict[str, int]) -> str:
    return ", ".join(f"{k}={n}" for k, n in point.items()) or "its one size"


def _plan_budget_estimates(console: Console, build_plan: BuildPlan) -> None:
    for u in build_plan.units():
        budget = u.budget
        limit = min((v for k, v in budget.limits.items() if k in ("storage", "flash")), default=None)
        if budget.estimate_bytes is not None and limit is not None and budget.estimate_bytes > limit:
            console.warn(f"{u.model} on {u.target} ({u.unit}): weights alone are estimated at "
                         f"{format_size(budget.estimate_bytes)} from `params`, over the unit's "
                         f"{format_size(limit)} budget; the build will check the real size")


def _plan_indexes(console: Console, build_plan: BuildPlan, status: Mapping[str, str]) -> None:
    for t in build_plan.targets:
        for a in t.assets:
            if a.kind != "vector_index":
                continue
            if a.reference is not None and a.agreement is not None:
                console.result(f"  {t.target}: index {a.name}: {len(a.corpus)} file(s) embedded by {a.model}'s host "
                               f"reference program (xnnpack fp32, {a.reference.program_key[:12]}), the target's "
                               f"program on {a.agreement.sample} chunks to prove it ({status[a.key]}, {a.key[:12]})")
            else:
                console.result(f"  {t.target}: index {a.name}: {len(a.corpus)} file(s) embedded by {a.model} "
                               f"({status[a.key]}, {a.key[:12]})")
            if a.queries is not None:
                console.result(f"  {t.target}: index {a.name}: {len(a.queries.queries)} queries from "
                               f"{a.queries.file} retrieve as with eager fp32 (top-{a.queries.topk} overlap >= "
                               f"{a.queries.min_topk_overlap:.0%}), or no bundle")


def _plan_toolchains(console: Console, build_plan: BuildPlan) -> None:
    """Where each backend's toolchain comes from, or why it cannot build here."""
    used = sorted({s.backend for u in build_plan.units() for s in u.skipped} | {u.backend for u in build_plan.units()})
    for name in used:
        found = build_plan.toolchain.backends[name]
        if found.source or not found.usable:
            facts = ", ".join(f"{k} {v[:12] if k == 'compat_layer' else v}" for k, v in found.facts.items()
                              if k != "libraries")
            console.result(f"  toolchain {name}: " + (f"{found.source}" + (f" ({facts})" if facts else "")
                                                     if found.usable else f"not usable here: {found.reason}"))


def _plan_releases(console: Console, releases: list[ReleaseStatus]) -> None:
    from deployc.plan.releases import EXPLAIN

    for r in releases:
        files = f": {', '.join(r.files)}" if r.files else ""
        console.result(f"  release {r.profile}: {r.state} ({EXPLAIN[r.state]}){files}")


def arm64_figures(check: Arm64Check) -> str:
    """The arm64 check in a table cell: `arm64 cos 0.99995, 44.1 dB`, `arm64 not-run`."""
    if check.metrics is None:
        return f"arm64 {check.status}"
    figures = f"cos {check.metrics.min_cosine:.5f}, {check.metrics.min_sqnr_db:.1f} dB"
    if check.text:
        figures = text_figures(check.text.perplexity, check.text.reference_perplexity, check.text.kl, check.text.top1)
    return f"arm64 {figures}" if check.status == "passed" else f"arm64 {check.status}: {figures}"


def render_build(console: Console, report: BuildReport) -> None:
    """The units as a table, the candidates of each choice, then one section of lines each: failures,
    fallbacks, layers left float, a microcontroller's memory, checks not run, bundles, reproducibility,
    ETRecords."""
    _build_units(console, report)
    _render_candidates(console, report)
    _build_failures(console, report)
    _build_fallbacks(console, report)
    _build_stayed_float(console, report)
    _build_memory(console, report)
    _build_not_run(console, report)
    _build_outputs(console, report)


def _verification_words(r: UnitResult) -> str:
    """A unit's verification in its table cell: status, x86 figures beside the arm64 check's, text, task and
    token figures, and what ran where the program did not run in a runtime."""
    v = r.verification
    vtext: str = v.status if v else "-"
    x86 = "x86 " if r.arm64 else ""  # both runtimes' figures side by side
    arm64 = f"; {arm64_figures(r.arm64)}" if r.arm64 else ""
    if v and v.metrics:
        here = arm64 if not v.text else ""  # a decoder's arm64 figures follow its text figures
        vtext += f" ({x86}cos {v.metrics.min_cosine:.5f}, {v.metrics.min_sqnr_db:.1f} dB{here})"
    if v and v.text:
        vtext += f", {text_figures(v.text.perplexity, v.text.reference_perplexity, v.text.kl, v.text.top1)}"
    if v and v.task:
        vtext += f", {task_figures(v.task)}"
    if v and v.tokens:
        vtext += f", {token_figures(v.tokens.matched, v.tokens.generated, v.tokens.prompts, v.tokens.identical)}"
    if v and v.text and arm64:
        vtext += arm64
    if v and v.ran_on:  # not the program in a runtime: say what ran
        vtext += f" ({v.ran_on})"
    if v and v.method_calls:  # a static decoder: what its check cost, per method (the emulator's, for the NPU)
        vtext += "; " + ", ".join(f"{name} {c.calls} calls at {c.per_call_s:.2f} s"
                                  for name, c in v.method_calls.items())
    return vtext


def _build_units(console: Console, report: BuildReport) -> None:
    # Latency is this host's (an NPU program's is the HTP emulator's on x86): not the device's.
    table = Table("model", "target", "unit", "quant", "status", "size", "planned mem", "delegated", "verification",
                  "host latency")
    for r in report.units:
        f = r.facts
        latency = f.measurement.latency_ms if f else None
        quant = r.unit.quantization if r.unit.choice is None else f"{choice_words(r.unit)}: {r.unit.quantization}"
        table.add_row(r.unit.model, r.unit.target, f"{r.unit.unit} ({r.unit.backend})", quant, r.status,
                      format_size(f.size_bytes) if f else "-",
                      format_size(f.planned_memory_bytes) if f and f.format == "pte" else "-",
                      f"{f.delegated_share:.0%}" if f and f.format == "pte" else "-", _verification_words(r),
                      f"{latency:.2f} ms" if latency is not None else "-")
    console.table(table)


def _build_failures(console: Console, report: BuildReport) -> None:
    for r in report.failed:
        assert r.failure is not None
        where = f"{r.failure.at}: error: " if r.failure.at else ""
        console.result(f"{where}FAILED {r.unit.model} on {r.unit.target} ({r.unit.unit}) at {r.failure.step}: "
                       f"{r.failure.error}")
        if r.failure.log:
            console.result(f"  what the libraries printed: {r.failure.log}")


def _build_fallbacks(console: Console, report: BuildReport) -> None:
    for r in report.units:
        for fell in r.fallbacks:
            console.result(f"fell back: {r.unit.model} on {r.unit.target}: unit {fell.unit} ({fell.backend}) failed at "
                           f"{fell.step}: {fell.error}; " + (f"built on unit {r.unit.unit} ({r.unit.backend}) instead"
                                                        if r.status != "failed" else
                                                        f"unit {r.unit.unit} ({r.unit.backend}) was tried next and "
                                                        "failed too"))


def _build_stayed_float(console: Console, report: BuildReport) -> None:
    for r in report.units:  # e.g. a conv net in 8da8w: torchao's schemes quantize linears only
        if r.facts and r.facts.stayed_float:
            names = r.facts.stayed_float
            shown = ", ".join(names[:4]) + (f" and {len(names) - 4} more" if len(names) > 4 else "")
            console.result(f"stayed float: {r.unit.model} on {r.unit.target} ({r.unit.quantization}): "
                           f"{len(names)} weighted layer(s) not quantized: {shown}")


def _build_memory(console: Console, report: BuildReport) -> None:
    for r in report.units:  # a microcontroller's memory, as its app must provide it
        limits = r.unit.budget.limits
        if r.facts and ("sram" in limits or "flash" in limits):
            f = r.facts
            console.result(f"memory: {r.unit.model} on {r.unit.target} ({r.unit.unit}): arena "
                           f"{format_size(f.planned_memory_bytes)} (kernel scratch {format_size(f.scratch_bytes)} "
                           f"inside) of sram {format_size(limits['sram']) if 'sram' in limits else '-'}; program "
                           f"{format_size(f.size_bytes)} of flash "
                           f"{format_size(limits['flash']) if 'flash' in limits else '-'}")


def _build_not_run(console: Console, report: BuildReport) -> None:
    for r in report.units:
        if r.verification and r.verification.status == "not-run":
            console.result(f"not run: {r.unit.model} on {r.unit.target}: {r.verification.reason}")
        if r.arm64 and r.arm64.status == "not-run":
            console.result(f"not run on arm64: {r.unit.model} on {r.unit.target}: {r.arm64.reason}")
        elif r.arm64 and r.arm64.left_out:
            console.result(f"not run on arm64: {r.unit.model} on {r.unit.target} at "
                           f"{', '.join(_point(p) for p in r.arm64.left_out)}: past the check's budget of "
                           f"{r.unit.verify.budget_s:.0f} s by the plan's estimate (verify.seconds)")


def _build_outputs(console: Console, report: BuildReport) -> None:
    """The bundles written (and those not), the reproducibility check, the ETRecords."""
    for t, b in report.bundles.items():
        console.result(f"bundle {t}: {b.dir}  ({b.archive})")
    for t, why in report.bundles_not_written.items():
        console.result(f"no bundle for {t}: {why}")
    if report.differences is not None:
        console.result("reproducible: byte-identical" if report.reproducible else "NOT reproducible:")
        for line in report.differences:
            console.result(f"  {line}")
    for e in report.etrecords or []:
        how = " (cached)" if e.cached else ""
        console.result(f"etrecord {e.target}/{e.program}: {e.path}{how}" if e.path
                       else f"no etrecord for {e.target}/{e.program}: {e.reason}")


def _render_candidates(console: Console, report: BuildReport) -> None:
    """Every scheme a unit choosing by measurement verified, beside the one it kept."""
    choosing = [r for r in report.units if r.candidates]
    if not choosing:
        return
    table = Table("model", "target", "unit", "by", "candidate", "result", "size", "host latency", "verification")
    for r in choosing:
        for c in r.candidates:
            figures = f"cos {c.metrics.min_cosine:.5f}, {c.metrics.min_sqnr_db:.1f} dB" if c.metrics else ""
            if c.text:
                figures += (", " if figures else "") + text_figures(c.text.perplexity, c.text.reference_perplexity,
                                                                    c.text.kl, c.text.top1)
            if c.task:
                figures += (", " if figures else "") + task_figures(c.task)
            if c.error:
                error = c.error.removeprefix("verification against eager PyTorch missed: ")
                figures += (f"; {c.step}: " if figures else f"{c.step}: ") + error[:120]
            result = "chosen" if c.chosen else c.status
            table.add_row(r.unit.model, r.unit.target, r.unit.unit, r.unit.choice.by if r.unit.choice else "-",
                          c.scheme, result, format_size(c.size_bytes) if c.size_bytes is not None else "-",
                          f"{c.latency_ms:.2f} ms" if c.latency_ms is not None else "-", figures or "-")
    console.table(table)


def render_profiling(console: Console, profiles: list[ProgramProfile], trace: Path | None) -> None:
    for p in profiles:
        if p.status != "profiled":
            console.result(f"{p.program} ({p.backend}): {p.status}: {p.reason}")
            continue
        dims = ", ".join(f"{k}={v}" for k, v in p.dims.items()) or "static"
        console.result(f"{p.program} ({p.backend}): {p.method} {p.call_ms:.3f} ms a call (median of {p.runs}, "
                       f"{dims}) on {p.ran_on}")
        sourced = any(o.source for o in p.operators)
        table = Table("operator / delegate call", "kind", "calls", "ms a call", "share",
                      *(["module"] if sourced else []))
        for o in p.operators:
            table.add_row(o.name, o.kind, str(o.calls), f"{o.median_ms:.4f}", f"{o.share:.1%}",
                          *([", ".join(o.source[:3]) + (" ..." if len(o.source) > 3 else "")] if sourced else []))
        console.table(table)
        console.result("  (a delegate op's time is part of its delegate call's; operators run outside delegates)")
        if p.etrecord_note:
            console.result(f"  ETRecord: {p.etrecord or '-'}: {p.etrecord_note}")
        if p.etdump:
            console.result(f"  ETDump: {p.etdump}")
        if p.etdump and p.etrecord:
            console.result("  Model Explorer (docs/report.md): model-explorer --extensions=etrecord_adapter_model_"
                           f"explorer,etdump_data_provider_model_explorer {p.etrecord}  (ETDump overlay: {p.etdump})")
    if trace is not None:
        console.result(f"Chrome trace: {trace} (open in chrome://tracing or ui.perfetto.dev)")


def render_inspect(console: Console, info: dict[str, Any]) -> None:
    """A bundle's programs as a table with what each needs and runs, its bytes by kind, its indexes, the
    check against its lock, and (--self-test) the self-tests' verdicts."""
    if "bundle" in info:
        _inspect_programs(console, info)
        _inspect_needs(console, info)
    if info.get("bytes_by_kind"):
        console.table(_byte_kinds_table(info["bytes_by_kind"]))
    _inspect_indexes(console, info)
    console.result("verified against bundle.lock.json: ok" if info["verified"]
                   else "MISMATCH against bundle.lock.json:")
    for problem in info["problems"]:
        console.result(f"  {problem}")
    if "self_test" in info:
        _inspect_self_tests(console, info["self_test"])


def _shipped_verification(v: dict[str, Any]) -> str:
    """A shipped program's verification, as the runtime config records it, in a table cell."""
    measured = f" (cos {v['min_cosine']}, {v['min_sqnr_db']} dB)" if v["status"] != "not-run" else ""
    vtext = v["status"] + measured
    if v.get("text_positions"):
        vtext += f", {text_figures(v['perplexity'], v['reference_perplexity'], v['kl'], v['top1'])}"
    if v.get("task_samples"):
        vtext += ", " + (f"top-1 {v['task_top1']:.0%} of {v['task_samples']}" if not v.get("task_topk") else
                         f"top-{v['task_topk']} overlap {v['task_topk_overlap']:.0%} (rank moved "
                         f"{v['task_mean_rank_change']:.2f}) of {v['task_samples']}")
    if v.get("tokens_generated"):
        vtext += ", " + token_figures(v["tokens_matched"], v["tokens_generated"], v.get("tokens_prompts", 0),
                                      v.get("tokens_identical", 0))
    return vtext


def _tensor_words(t: dict[str, Any]) -> str:
    return f"{t['name']}:{t['dtype']}[" + ",".join(
        str(d["value"]) if d["value"] >= 0 else f"{d.get('symbol') or '?'}={d['min']}..{d['max']}"
        + (f" (x{d['multiple_of']})" if d.get("multiple_of", 1) > 1 else "")
        for d in t["shape"]) + "]"


def _inspect_programs(console: Console, info: dict[str, Any]) -> None:
    b = info["bundle"]
    console.result(f"{info['path']}: {b['name']} {b['version']} for {b['target']} "
                   f"({info['device'].get('soc', '?')}), {format_size(info['total_bytes'])}")
    table = Table("program", "unit", "backend", "quant", "size", "method", "inputs", "outputs", "planned mem",
                  "delegates", "verification")
    for p in info["programs"]:
        vtext = _shipped_verification(p["verification"])
        litert = p.get("format") == "tflite"  # LiteRT plans its own memory; its delegate is a requirement
        for m in p["methods"]:
            table.add_row(p["name"], p["unit"], p["backend"] + (" (.tflite)" if litert else ""), p["quantization"],
                          format_size(p["size_bytes"]), m["name"], " ".join(_tensor_words(t) for t in m["inputs"]),
                          " ".join(_tensor_words(t) for t in m["outputs"]),
                          "-" if litert else format_size(m["planned_memory_bytes"]),
                          ", ".join(m["delegates"]) or "-", vtext)
    console.table(table)


def _inspect_needs(console: Console, info: dict[str, Any]) -> None:
    """What each program needs on the device, and the operators each method runs outside delegates."""
    for p in info["programs"]:
        if p.get("requirements"):
            console.result(f"  {p['name']} needs on the device: "
                           + ", ".join(f"{r['name']}={r['value']}" for r in p["requirements"]))
        for m in p["methods"]:
            ops = ", ".join(m["operators"]) or "- (all delegated)"
            console.result(f"  {p['name']}.{m['name']} operators: {ops}")


def _inspect_indexes(console: Console, info: dict[str, Any]) -> None:
    for ix in info.get("indexes", []):
        by = "a host reference program" if ix.get("embedded_with") else "the target's program"
        line = f"index {ix['name']}: {ix['count']} x {ix['dim']} vectors of {ix['model']} by {by}"
        if ix.get("agreement"):
            a = ix["agreement"]
            line += f"; the target's program agrees on {a['sample']} chunks: top-{a['topk']} {a['topk_overlap']:.0%}"
        if ix.get("retrieval"):
            r = ix["retrieval"]
            line += (f"; {r['queries']} queries retrieve as with eager fp32: top-{r['topk']} overlap "
                     f"{r['topk_overlap']:.0%} (rank moved {r['mean_rank_change']:.2f})")
        console.result(line)


def _inspect_self_tests(console: Console, results: list[dict[str, Any]]) -> None:
    from deployc.core.facts import TaskMetrics

    table = Table("program", "backend", "self-test", "cases", "cosine", "SQNR", "held-out text / task samples",
                  "tolerance", "why")
    for r in results:
        s, t, task = r["summary"], r.get("text"), r.get("task")
        tolerance = f"cos >= {r['min_cosine']}, >= {r['min_sqnr_db']} dB"
        if r.get("max_perplexity_ratio"):
            tolerance += (f", ppl <= {r['max_perplexity_ratio']}x, KL <= {r['max_kl']}, "
                          f"top-1 >= {r['min_top1']:.0%}")
        elif task:
            tolerance += (f", top-1 >= {r['min_top1']:.0%}" if task.get("top1") is not None
                          else f", overlap >= {r['min_topk_overlap']:.0%}")
        figures = (text_figures(t["perplexity"], t["reference_perplexity"], t["kl"], t["top1"]) if t
                   else task_figures(TaskMetrics.model_validate(task)) if task else "-")
        table.add_row(r["program"], r["backend"], r["status"], str(r["cases"]),
                      f"{s['min_cosine']:.6f}" if s else "-", f"{s['min_sqnr_db']:.1f} dB" if s else "-",
                      figures, tolerance, r["reason"] or "-")
    console.table(table)


def _byte_kinds_table(kinds: dict[str, dict[str, int]]) -> Table:
    """Where each program's bytes go (packaging/program_bytes.py says how they are told apart)."""
    table = Table("program", "quantized weights", "float weights", "scales", "graph and other")
    for name, k in kinds.items():
        total = sum(k.values()) or 1
        table.add_row(name, *(f"{format_size(k[f])} ({k[f] / total:.0%})"
                              for f in ("quantized_weights", "float_weights", "scales", "other")))
    return table


def render_pte(console: Console, info: dict[str, Any]) -> None:
    console.result(f"{info['path']}: ExecuTorch program, {format_size(info['size_bytes'])}, constants "
                   f"{format_size(info['constant_bytes'])}, delegate segments {format_size(info['segment_bytes'])}")
    console.table(_byte_kinds_table({Path(info["path"]).name: info["bytes_by_kind"]}))
    for m in info["methods"]:
        console.result(f"  {m['name']}: {m['inputs']} input(s), {m['outputs']} output(s), planned memory "
                       f"{format_size(m['planned_memory_bytes'])}, delegates {', '.join(m['delegates']) or '-'}")
        console.result(f"    operators: {', '.join(m['operators']) or '-'}")


def render_diff(console: Console, result: dict[str, Any]) -> None:
    if result["identical"]:
        console.result("identical")
        return
    for f in result["files"]:
        console.result(f"{f['change']:>8}  {f['file']}  {f['size_a']} -> {f['size_b']}")
    for p in result["programs"]:
        for k, (va, vb) in p["changes"].items():
            console.result(f"  {p['program']}.{k}: {va} -> {vb}")


def render_run(console: Console, result: dict[str, Any]) -> None:
    for name, value in result["outputs"].items():
        if isinstance(value, list) and value and isinstance(value[0], dict) and "text" in value[0]:
            console.result(f"{name}:")
            for c in value:
                console.result(f"  [{c['score']:.3f}] {c['source']}: {c['text'][:100]}")
        else:
            console.result(f"{name}: {value}")
    console.result(f"program load: {result['load_ms']:.0f} ms; stage latency: "
                   + ", ".join(f"{k} {v:.1f} ms" for k, v in result["latency_ms"].items()))
    if g := result.get("generation"):
        console.result(f"generation: first token {g['first_token_ms']:.1f} ms after the stage began "
                       f"({g['prompt_tokens']} prompt tokens), then {g['per_token_ms']:.2f} ms per token, "
                       f"{g['tokens']} tokens")
        console.result(f"  prefill {g['prefill_tokens_per_s']:.1f} tok/s ({g['prefill_ms']:.1f} ms); "
                       f"decode {g['decode_tokens_per_s']:.1f} tok/s")


def render_profiles(console: Console, found: dict[str, tuple[Path, Origin]]) -> None:
    table = Table("profile", "from", "file")
    for name, (path, origin) in found.items():
        table.add_row(name, origin, str(path))
    console.table(table)


def render_profile(console: Console, loaded: LoadedProfile) -> None:
    p = loaded.profile
    console.result(f"{p.name}: {p.description}".rstrip(": "))
    console.result(f"  from: {' <- '.join(str(f) for f in loaded.files)}")
    console.result(f"  device: {p.device.soc}, {p.device.os}, {p.device.abi}")
    table = Table("unit", "backend", "quantization", "threads", "budgets")
    for u in p.units:
        budgets = u.budgets.model_dump(exclude_none=True) if u.budgets else {}
        table.add_row(u.name, u.backend, ", ".join(u.quantization), str(u.threads or "-"),
                      ", ".join(f"{k}={format_size(v)}" for k, v in budgets.items()) or "-")
    console.table(table)
    overall = ", ".join(f"{k}={format_size(v)}" for k, v in p.budgets.model_dump(exclude_none=True).items())
    console.result(f"  budgets: {overall or '-'}; fallback: {p.fallback}")
