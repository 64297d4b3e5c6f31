"""Build the programs of a plan and judge every unit: each distinct program is made once (by an
executor, through the cache) and every unit that uses it is judged against its own tolerances,
declared outputs and budgets.

The driver process never imports torch: a no-op rebuild only hashes cached files.
"""

from __future__ import annotations

import time

from deployc.build.cache import Cache, Entry
from deployc.build.executors import Executor
from deployc.build.facts import FACTS_FILE, ProgramFacts, TensorFacts, program_file
from deployc.build.results import Failure, Fallback, Tolerance, UnitResult, Verification, WorkerResult
from deployc.core.events import Event, EventSink, Say
from deployc.core.sizes import format_size
from deployc.graph.metrics import judge, judge_text
from deployc.plan.build_plan import BuildPlan, OutputPlan, UnitPlan

_USAGE = {"storage": "program size", "flash": "program size", "ram": "program + planned memory",
          "sram": "planned activation memory"}


def budget_problems(unit: UnitPlan, facts: ProgramFacts) -> list[str]:
    size, planned = facts.size_bytes, facts.planned_memory_bytes
    usage = {"storage": size, "flash": size, "ram": size + planned, "sram": planned}
    return [f"{_USAGE[k]} {format_size(usage[k])} ({usage[k]} B) exceeds the {k} budget {format_size(v)} ({v} B) "
            f"of unit '{unit.unit}' on target '{unit.target}'"
            for k, v in sorted(unit.budget.limits.items()) if usage[k] > v]


def output_problem(unit: UnitPlan, facts: ProgramFacts) -> tuple[str, str] | None:
    """(method, problem) when the manifest's declared `outputs` do not match what the program returns."""
    dims = {d.name for d in facts.dims}
    package = unit.package
    for method, declared in [("forward", package.outputs), *package.method_outputs.items()]:
        problem = compare_outputs(method, declared, facts.signatures[method].outputs, dims)
        if problem:
            return method, problem
    return None


def compare_outputs(method: str, declared: list[OutputPlan], actual: list[TensorFacts], dims: set[str]) -> str | None:
    if not declared:
        return None
    where = "the model" if method == "forward" else f"method {method}"
    if len(actual) != len(declared):
        return f"{where} returns {len(actual)} output(s); the manifest declares {len(declared)}"
    for d, a in zip(declared, actual):
        shown = [s if isinstance(s, (int, str)) else f"{s.min}..{s.max}" for s in a.shape]
        mismatch = f"output {d.name}: declared {d.dtype}{d.shape}, {where} returns {a.dtype}{shown}"
        if len(d.shape) != len(a.shape) or d.dtype != a.dtype:
            return mismatch
        for want, got in zip(d.shape, a.shape):
            if isinstance(want, int) and want != got:
                return mismatch
            if isinstance(want, str) and want not in dims:
                return f"output {d.name}: dim '{want}' is not one of the model's dims"
    return None


def judge_unit(unit: UnitPlan, result: WorkerResult, entry: Entry | None) -> UnitResult:
    judged = UnitResult(unit=unit, status=result.status, node=result.node, attempts=result.attempts)
    if result.status == "failed":
        declared = unit.dims_at.get(result.dim) if result.dim else None
        error = f"{declared.field}: {result.error}" if declared else result.error or ""
        return judged.model_copy(update={"failure": Failure(step=result.step or "build", error=error, log=result.log,
                                                            at=declared.at if declared else None)})
    if entry is None:
        return judged.model_copy(update={"status": "failed", "failure": Failure(
            step="cache", error="the built program vanished from the cache")})
    facts = ProgramFacts.model_validate_json(entry.file(FACTS_FILE).read_text())
    v = unit.verify
    tolerance = Tolerance(min_cosine=v.min_cosine, min_sqnr_db=v.min_sqnr_db, max_abs=v.max_abs, tokens=v.min_tokens,
                          max_perplexity_ratio=v.max_perplexity_ratio, max_kl=v.max_kl, min_top1=v.min_top1)
    measured = facts.measurement
    failure = None
    if not v.run:
        verification = Verification(status="not-run", reason=v.reason, tolerance=tolerance)
    elif measured.status != "measured" or measured.summary is None:
        verification = Verification(status="failed", reason=measured.reason, tolerance=tolerance)
        failure = Failure(step="verify", error=measured.reason)
    else:
        missed = judge(measured.summary, v.min_cosine, v.min_sqnr_db, v.max_abs)
        if v.min_tokens and (measured.tokens is None or measured.tokens.matched < v.min_tokens):
            got = f"{measured.tokens.matched} of {measured.tokens.generated}" if measured.tokens else "none"
            missed.append(f"greedy tokens equal to eager's: {got} (the first {v.min_tokens} must be)")
        text = measured.text
        if v.max_perplexity_ratio is not None and v.max_kl is not None and v.min_top1 is not None:
            if text is None:
                missed.append("the held-out text was not measured")
            else:
                missed += judge_text(text, v.max_perplexity_ratio, v.max_kl, v.min_top1)
            # A device's self-test judges the positions it carries with the same tolerances: they hold here too.
            shipped = measured.self_test_text
            if shipped is not None and not missed:
                missed += [f"on the {shipped.positions} positions of the self-test vectors, {m}"
                           for m in judge_text(shipped, v.max_perplexity_ratio, v.max_kl, v.min_top1)]
        verification = Verification(status="failed" if missed else "passed", metrics=measured.summary,
                                    points=measured.points, tokens=measured.tokens, text=text,
                                    text_reason=unit.export.text_reason, ran_on=measured.ran_on, tolerance=tolerance)
        if missed:
            failure = Failure(step="verify", error="verification against eager PyTorch missed: " + "; ".join(missed))
    mismatch = output_problem(unit, facts)
    if mismatch and failure is None:
        method, problem = mismatch
        field = "outputs" if method == "forward" else f"methods.{method}.outputs"
        failure = Failure(step="outputs", error=f"models.{unit.model}.{field}: {problem}",
                          at=unit.outputs_at.get(method))
    if v.int8_only and facts.float_ops and failure is None:
        failure = Failure(step="int8", error=(
            f"unit '{unit.unit}' on target '{unit.target}' runs int8 kernels only, and these operators stayed "
            f"outside them, computing in floating point: {', '.join(facts.float_ops)} (set "
            f"models.{unit.model}.verify.allow_float_ops: true to ship them as portable kernels)"))
    over = budget_problems(unit, facts)
    if over and failure is None:
        failure = Failure(step="budget", error="; ".join(over))
    return judged.model_copy(update={"status": "failed" if failure else result.status, "failure": failure,
                                     "facts": facts, "verification": verification,
                                     "program": str(entry.file(program_file(facts.format)))})


# A failure at these steps is the backend's (it cannot quantize, lower or run the graph): with
# `fallback: next` the unit's next candidate is built instead. Earlier steps fail on every backend.
BACKEND_STEPS = frozenset({"quantize", "lower", "serialize", "verify"})
# Of those, the compiler's verdicts: the same program key fails the same way every time, so the
# failure is cached (a rebuild goes straight to the fallback instead of lowering again).
DETERMINISTIC_STEPS = frozenset({"quantize", "lower", "serialize"})
FAILURE_FILE = "failure.json"


def _cached_failure(cache: Cache, key: str) -> WorkerResult | None:
    entry, _ = cache.of_kind("failures").get(key)
    if entry is None:
        return None
    return WorkerResult.model_validate_json(entry.file(FAILURE_FILE).read_text())


def _remember_failure(cache: Cache, result: WorkerResult) -> None:
    failures = cache.of_kind("failures")
    with failures.lock(result.key):
        if failures.get(result.key)[0] is None:
            staging = failures.tmp_dir()
            kept = WorkerResult(key=result.key, status="failed", step=result.step, error=result.error, dim=result.dim)
            (staging / FAILURE_FILE).write_text(kept.model_dump_json())
            failures.put(result.key, staging)


def _backend_failed(result: WorkerResult) -> bool:
    return result.status == "failed" and result.step in BACKEND_STEPS


def _chosen(unit: UnitPlan, results: dict[str, WorkerResult]) -> tuple[UnitPlan, list[Fallback]]:
    """The first candidate of `unit` (itself, then its fallbacks) that its backend could build."""
    candidates = [unit, *unit.fallbacks]
    fell: list[Fallback] = []
    for candidate in candidates[:-1]:
        result = results.get(candidate.program_key)
        if result is None or not _backend_failed(result):
            return candidate, fell
        first_line = next(iter((result.error or "").strip().splitlines()), "")
        fell.append(Fallback(unit=candidate.unit, backend=candidate.backend, step=result.step or "",
                             error=first_line[:300]))
    return candidates[-1], fell  # the last candidate stands, built or failed


def _run(todo: list[UnitPlan], cached: int, plan: BuildPlan, cache: Cache, executor: Executor, events: EventSink,
         say: Say, warn: Say) -> dict[str, WorkerResult]:
    say(f"building {len(todo)} program(s) with {executor.describe(len(todo))}; {cached} cached")
    for u in todo:
        events(Event(label=u.label, kind="queued"))
    t = time.perf_counter()
    built = executor.run(todo, plan.folder, cache, events)
    for r in built.values():
        if r.warning:
            warn(r.warning)
    say(f"built in {time.perf_counter() - t:.1f} s")
    return built


def build(plan: BuildPlan, cache: Cache, executor: Executor, events: EventSink, say: Say,
          warn: Say) -> dict[str, UnitResult]:
    """Build every distinct program (or find it cached), falling back to a unit's next candidate where
    its backend failed; judge every unit. Keyed by the label of the unit as planned."""
    results: dict[str, WorkerResult] = {}
    wanted = plan.programs()
    while wanted:
        todo = []
        for key, unit in wanted.items():
            entry, warning = cache.get(key)
            if warning:
                warn(warning)
            # A unit with somewhere to fall back to skips a lowering known to fail; others try again.
            failed = _cached_failure(cache, key) if entry is None and unit.fallbacks else None
            if entry is not None:
                results[key] = WorkerResult(key=key, status="cached")
            elif failed is not None:
                results[key] = failed
            else:
                todo.append(unit)
        if todo:
            built = _run(todo, len(wanted) - len(todo), plan, cache, executor, events, say, warn)
            for r in built.values():
                if r.status == "failed" and r.step in DETERMINISTIC_STEPS:
                    _remember_failure(cache, r)
            results.update(built)
        wanted = {}
        for u in plan.units():  # the next candidate of every unit whose backend just failed
            chosen, fell = _chosen(u, results)
            if chosen.program_key not in results:
                wanted.setdefault(chosen.program_key, chosen)
                say(f"{u.label}: {fell[-1].backend} failed at {fell[-1].step}; falling back to unit "
                    f"{chosen.unit} ({chosen.backend})")
    # One verified read per program, however many targets share it (a MiniLM program is 58 MB to hash).
    entries = {key: cache.get(key)[0] if r.status != "failed" else None for key, r in results.items()}
    for entry in entries.values():
        if entry is not None:
            cache.publish(entry)  # what local workers built reaches a shared cache too
    judged = {}
    for u in plan.units():
        chosen, fell = _chosen(u, results)
        result = judge_unit(chosen, results[chosen.program_key], entries[chosen.program_key])
        judged[u.label] = result.model_copy(update={"fallbacks": fell}) if fell else result
    return judged
