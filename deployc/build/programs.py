"""Build the programs of a plan and judge every unit: each distinct program is made once (by an
executor, through the cache) and every unit that uses it is judged against its own tolerances,
declared outputs and budgets.

The driver process never imports torch: a no-op rebuild only hashes cached files.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from deployc.build.cache import Cache, Entry
from deployc.build.executors import Executor
from deployc.build.results import (
    CandidateResult,
    Failure,
    Fallback,
    Tolerance,
    UnitResult,
    Verification,
    WorkerResult,
)
from deployc.core.events import Event, EventSink, Say
from deployc.core.facts import FACTS_FILE, Measurement, ProgramFacts, TensorFacts, program_file
from deployc.core.sizes import format_size
from deployc.graph.metrics import judge, judge_self_test_text, judge_task, judge_text
from deployc.plan.build_plan import BuildPlan, OutputPlan, UnitPlan, Verify

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
    """A unit's program judged against the unit's own tolerances, declared outputs, int8-only rule and budgets;
    the first that fails is the unit's failure."""
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
    verification, failure = _verification(unit, facts)
    failure = failure or _outputs_failure(unit, facts) or _int8_failure(unit, facts) or _budget_failure(unit, facts)
    return judged.model_copy(update={"status": "failed" if failure else result.status, "failure": failure,
                                     "facts": facts, "verification": verification,
                                     "program": str(entry.file(program_file(facts.format)))})


def _verification(unit: UnitPlan, facts: ProgramFacts) -> tuple[Verification, Failure | None]:
    v = unit.verify
    tolerance = Tolerance(min_cosine=v.min_cosine, min_sqnr_db=v.min_sqnr_db, max_abs=v.max_abs, tokens=v.min_tokens,
                          max_perplexity_ratio=v.max_perplexity_ratio, max_kl=v.max_kl, min_top1=v.min_top1,
                          min_topk_overlap=v.min_topk_overlap)
    measured = facts.measurement
    if not v.run:
        return Verification(status="not-run", reason=v.reason, tolerance=tolerance), None
    if measured.status != "measured" or measured.summary is None:
        return (Verification(status="failed", reason=measured.reason, tolerance=tolerance),
                Failure(step="verify", error=measured.reason))
    missed = _missed(v, measured)
    verification = Verification(status="failed" if missed else "passed", metrics=measured.summary,
                                points=measured.points, tokens=measured.tokens, text=measured.text, task=measured.task,
                                text_reason=unit.export.text_reason, ran_on=measured.ran_on,
                                method_calls=measured.method_calls, tolerance=tolerance)
    failure = (Failure(step="verify", error="verification against eager PyTorch missed: " + "; ".join(missed))
               if missed else None)
    return verification, failure


def _missed(v: Verify, measured: Measurement) -> list[str]:
    """Every tolerance a measured program missed, in words."""
    assert measured.summary is not None
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
        # A device's self-test judges the positions it carries (KL and top-1): they hold here too.
        shipped = measured.self_test_text
        if shipped is not None and not missed:
            missed += [f"on the {shipped.positions} positions of the self-test vectors, {m}"
                       for m in judge_self_test_text(shipped, v.max_kl, v.min_top1)]
    if v.data is not None:
        if measured.task is None:
            missed.append(f"the task samples ({v.data.file}) were not measured")
        else:
            missed += judge_task(measured.task, v.min_top1 if v.data.measure == "top1" else None, v.min_topk_overlap)
    return missed


def _outputs_failure(unit: UnitPlan, facts: ProgramFacts) -> Failure | None:
    mismatch = output_problem(unit, facts)
    if not mismatch:
        return None
    method, problem = mismatch
    field = "outputs" if method == "forward" else f"methods.{method}.outputs"
    return Failure(step="outputs", error=f"models.{unit.model}.{field}: {problem}", at=unit.outputs_at.get(method))


def _int8_failure(unit: UnitPlan, facts: ProgramFacts) -> Failure | None:
    if not (unit.verify.int8_only and facts.float_ops):
        return None
    return Failure(step="int8", error=(
        f"unit '{unit.unit}' on target '{unit.target}' runs int8 kernels only, and these operators stayed "
        f"outside them, computing in floating point: {', '.join(facts.float_ops)} (set "
        f"models.{unit.model}.verify.allow_float_ops: true to ship them as portable kernels)"))


def _budget_failure(unit: UnitPlan, facts: ProgramFacts) -> Failure | None:
    over = budget_problems(unit, facts)
    return Failure(step="budget", error="; ".join(over)) if over else None


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


@dataclass
class _Settled:
    """Where a unit's walk through its candidates (its schemes, then its fallback units) stands."""

    todo: list[UnitPlan] = field(default_factory=list)  # programs to build before it can go on
    chosen: UnitPlan | None = None  # the program it ships (or, none passing, the one whose failure it reports)
    fell: list[Fallback] = field(default_factory=list)
    candidates: list[CandidateResult] = field(default_factory=list)
    none_passed: str = ""  # with a choice: why no candidate was kept


def _first_line(text: str | None) -> str:
    return next(iter((text or "").strip().splitlines()), "")[:300]


def _candidate(c: UnitPlan, judged: UnitResult | None, chosen: bool) -> CandidateResult:
    if judged is None:
        return CandidateResult(scheme=c.quantization, program_key=c.program_key, status="not-tried")
    f, v = judged.facts, judged.verification
    return CandidateResult(scheme=c.quantization, program_key=c.program_key, chosen=chosen,
                           status="failed" if judged.status == "failed" else "passed",
                           size_bytes=f.size_bytes if f else None, latency_ms=f.measurement.latency_ms if f else None,
                           metrics=v.metrics if v else None, text=v.text if v else None, task=v.task if v else None,
                           step=judged.failure.step if judged.failure else None,
                           error=_first_line(judged.failure.error) if judged.failure else None)


def _settle(unit: UnitPlan, results: dict[str, WorkerResult], judge: Callable[[UnitPlan], UnitResult]) -> _Settled:
    """Walk a unit's candidates in order: on each compute unit (itself, then its fallbacks) its schemes
    (one, or a choice), built and judged as far as `results` go. A unit goes on to its next compute unit
    when the backend fails, or, choosing by measurement, when no candidate meets every tolerance."""
    out = _Settled()
    groups = [unit, *unit.fallbacks]
    for i, group in enumerate(groups):
        last = i == len(groups) - 1
        if group.choice is None:
            result = results.get(group.program_key)
            if result is None:
                out.todo = [group]
                return out
            if _backend_failed(result) and not last:
                out.fell.append(Fallback(unit=group.unit, backend=group.backend, step=result.step or "",
                                         error=_first_line(result.error)))
                continue
            out.chosen = group
            return out
        candidates = [group, *group.candidates]
        missing = [c for c in candidates if c.program_key not in results]
        if group.choice.by == "latency" and missing:  # every candidate is measured before choosing
            out.todo = missing
            return out
        judged: dict[str, UnitResult] = {}
        winner = None
        for c in candidates:
            if c.program_key not in results:  # by size: the next cheapest, only once the cheaper ones missed
                out.todo = [c]
                return out
            judged[c.program_key] = judge(c)
            if judged[c.program_key].status != "failed" and group.choice.by == "size":
                winner = c
                break
        if group.choice.by == "latency":
            passing = [c for c in candidates if judged[c.program_key].status != "failed"]
            winner = min(passing, key=lambda c: _latency(judged[c.program_key]), default=None)
        out.candidates = [_candidate(c, judged.get(c.program_key), c is winner) for c in candidates]
        if winner is not None:
            out.chosen = winner
            return out
        why = "; ".join(f"{r.scheme}: {r.error}" for r in out.candidates)
        if not last:
            out.fell.append(Fallback(unit=group.unit, backend=group.backend, step="choose",
                                     error=f"no candidate met every tolerance ({why})"[:300]))
            out.candidates = []  # the report lists the candidates of the unit it was built on
            continue
        out.chosen, out.none_passed = group, f"no candidate scheme met every tolerance: {why}"
        return out
    raise AssertionError("a unit's last candidate always settles")


def _latency(judged: UnitResult) -> float:
    f = judged.facts
    return f.measurement.latency_ms if f and f.measurement.latency_ms is not None else float("inf")


@dataclass
class _Driver:
    """One plan's build in the driver process: what each program's build gave (`results`), its cache entry
    read once, each unit judged once per program, and each unit (and host reference program) handed on once
    its walk has settled (`settled`), while the other programs still build."""

    plan: BuildPlan
    cache: Cache
    executor: Executor
    events: EventSink
    say: Say
    warn: Say
    on_settled: Callable[[str, UnitResult], None]
    results: dict[str, WorkerResult] = field(default_factory=dict)
    entries: dict[str, Entry | None] = field(default_factory=dict)
    judged: dict[tuple[str, str], UnitResult] = field(default_factory=dict)
    handed: dict[str, UnitResult] = field(default_factory=dict)

    def entry(self, key: str) -> Entry | None:
        # One verified read per program, however many targets share it (a MiniLM program is 58 MB to hash).
        if key not in self.entries:
            self.entries[key] = self.cache.get(key)[0] if self.results[key].status != "failed" else None
        return self.entries[key]

    def judge(self, u: UnitPlan) -> UnitResult:
        key = (u.label, u.program_key)
        if key not in self.judged:
            self.judged[key] = judge_unit(u, self.results[u.program_key], self.entry(u.program_key))
        return self.judged[key]

    def wanted(self) -> dict[str, UnitPlan]:
        """The programs the units' walks need next, and the host reference programs, not yet built or found."""
        wanted = {k: r for k, r in self.plan.references().items() if k not in self.results}
        for u in self.plan.units():
            for c in _settle(u, self.results, self.judge).todo:
                wanted.setdefault(c.program_key, c)
        return wanted

    def not_cached(self, wanted: dict[str, UnitPlan]) -> list[UnitPlan]:
        """Those of `wanted` the cache has (or, for a unit with somewhere to go on to, knows to fail) are
        results now; the rest are returned, to build."""
        todo = []
        for key, unit in wanted.items():
            entry, warning = self.cache.get(key)
            if warning:
                self.warn(warning)
            # A unit with somewhere to go on to skips a lowering known to fail; others try again.
            failed = (_cached_failure(self.cache, key) if entry is None and (unit.fallbacks or unit.choice) else None)
            if entry is not None:
                self.results[key] = WorkerResult(key=key, status="cached")
                self.entries[key] = entry
            elif failed is not None:
                self.results[key] = failed
            else:
                todo.append(unit)
        self.hand_on()
        return todo

    def run(self, todo: list[UnitPlan], cached: int) -> None:
        todo = largest_first(todo)
        self.say(f"building {len(todo)} program(s) with {self.executor.describe(len(todo))}; {cached} cached")
        for u in todo:
            self.events(Event(label=u.label, kind="queued"))
        t = time.perf_counter()
        self.executor.run(todo, self.plan.folder, self.cache, self.events, self.arrived)
        self.say(f"built in {time.perf_counter() - t:.1f} s")

    def arrived(self, r: WorkerResult) -> None:
        """One program's build result, as it comes."""
        if r.warning:
            self.warn(r.warning)
        if r.status == "failed" and r.step in DETERMINISTIC_STEPS:
            _remember_failure(self.cache, r)
        self.results[r.key] = r
        self.hand_on()

    def hand_on(self) -> None:
        """Every unit whose walk the results so far settle, and every reference program built, handed on once."""
        for reference in self.plan.references().values():
            if reference.label not in self.handed and reference.program_key in self.results:
                self.handed[reference.label] = self.judge(reference)
                self.on_settled(reference.label, self.handed[reference.label])
        for u in self.plan.units():
            if u.label not in self.handed and not _settle(u, self.results, self.judge).todo:
                self.handed[u.label] = self.settled(u)
                self.on_settled(u.label, self.handed[u.label])

    def settled(self, u: UnitPlan) -> UnitResult:
        """A unit at the end of its walk: the program it ships, how it got there, and its verdict."""
        settled = _settle(u, self.results, self.judge)
        assert settled.chosen is not None
        # The walk goes through the unit's groups in order: the k-th failure hands on to group k + 1.
        for f, to in zip(settled.fell, u.fallbacks):
            self.say(f"{u.label}: {f.backend} failed at {f.step}; falling back to unit {to.unit} ({to.backend})")
        one = self.judge(settled.chosen).model_copy(update={"fallbacks": settled.fell,
                                                            "candidates": settled.candidates})
        if settled.none_passed:
            one = one.model_copy(update={"status": "failed", "failure": Failure(
                step="choose", error=f"{u.model} on {u.target}/{settled.chosen.unit}: {settled.none_passed}")})
        return one


def largest_first(todo: list[UnitPlan]) -> list[UnitPlan]:
    """The programs to build, the largest models first (longest processing time first): the workers finish
    together instead of one starting the longest lowering after the rest (rag_offline, cold: the CPU LLM's
    12-minute lowering began after both embedders had built on its worker). Ties, and models whose weight count
    the plan does not know, keep the plan's order."""
    return sorted(todo, key=lambda u: -(u.weights or 0))


def build(plan: BuildPlan, cache: Cache, executor: Executor, events: EventSink, say: Say, warn: Say,
          settled: Callable[[str, UnitResult], None] = lambda label, r: None) -> dict[str, UnitResult]:
    """Build every program the units' walks need (or find it cached): a unit's planned program, then,
    where its backend failed or no candidate of its choice of schemes passed, the next candidate; judge
    every unit. Keyed by the label of the unit as planned. `settled` gets each unit's label as planned and
    its result (and each host reference program's) as soon as the programs built so far settle it: what
    follows it starts while the rest build."""
    driver = _Driver(plan, cache, executor, events, say, warn, settled)
    while wanted := driver.wanted():
        todo = driver.not_cached(wanted)
        if todo:
            driver.run(todo, len(wanted) - len(todo))
    driver.hand_on()  # a plan whose programs were all cached: nothing arrived
    for key in driver.results:
        entry = driver.entry(key)
        if entry is not None:
            cache.publish(entry)  # what local workers built reaches a shared cache too
    return {u.label: driver.handed[u.label] for u in [*plan.units(), *plan.references().values()]}
