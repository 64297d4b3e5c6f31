"""What follows a build's programs, started as each program settles instead of after the last one: a unit's
arm64 check (qemu) and each target's assets (its indexes embed the corpus with the target's program, on the
HTP emulator for an NPU's). In rag_offline the CPU LLM is still lowering minutes after the other programs
have built: the indexes use that time, and the LLM's arm64 check follows it at once.

The work runs in threads of the driver process; the threads wait on child processes (qemu, the embed
worker), which share the cores with the build's workers."""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor
from types import TracebackType
from typing import TYPE_CHECKING

from deployc.build import arm64_check
from deployc.build.cache import Cache
from deployc.build.results import UnitResult
from deployc.core.events import Say
from deployc.plan.build_plan import BuildPlan, IndexAssetPlan, TargetPlan

if TYPE_CHECKING:
    from deployc.packaging.assets import Asset


class Downstream:
    """Started by `settled` (the build's hand-on of each unit and host reference program); `finish` waits for
    all of it. Targets in `skip` (a release kept as it is) get no assets; a target with a unit that failed
    gets none either, once the failure is known (assets started before it are cached all the same)."""

    def __init__(self, plan: BuildPlan, skip: set[str], cache: Cache, emulate: bool, say: Say) -> None:
        self.plan, self.skip, self.cache, self.emulate, self.say = plan, skip, cache, emulate, say
        self.reference_labels = {r.label for r in plan.references().values()}
        self.units: dict[str, UnitResult] = {}
        self.references: dict[str, UnitResult] = {}  # by program key
        # qemu checks one program at a time: a shared program's second unit then finds its measurement cached.
        self._checks = ThreadPoolExecutor(max_workers=1, thread_name_prefix="deployc-arm64")
        self._assets = ThreadPoolExecutor(max_workers=max(1, len(plan.targets)), thread_name_prefix="deployc-assets")
        self.checked: dict[str, Future[dict[str, UnitResult]]] = {}
        self.assets: dict[str, Future[list[Asset]]] = {}

    def __enter__(self) -> Downstream:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        cancel = kind is not None  # the build failed: what has not started never will
        self._checks.shutdown(wait=True, cancel_futures=cancel)
        self._assets.shutdown(wait=True, cancel_futures=cancel)

    def settled(self, label: str, r: UnitResult) -> None:
        """`label`: the unit's as planned (its result's own is the candidate's it ships, e.g. `...:8da4w`)."""
        if label in self.reference_labels:
            self.references[r.unit.program_key] = r
        else:
            self.units[label] = r
            self.checked[label] = self._checks.submit(arm64_check.check, {label: r}, self.cache, self.emulate,
                                                      self.say)
        for t in self.plan.targets:
            if t.profile not in self.assets and self._ready(t):
                self._start(t)

    def finish(self) -> tuple[dict[str, UnitResult], dict[str, list[Asset]]]:
        """Every unit as checked (keyed by its label as planned) and each target's assets; a target with a
        failed unit has none. Raises what an asset's build raised."""
        checked = {label: self.checked[label].result()[label] for label in self.units}
        for t in self.plan.targets:
            if t.profile not in self.assets and t.profile not in self.skip and not self._failed(t, checked):
                self._start(t)
        return checked, {profile: future.result() for profile, future in self.assets.items()}

    def _ready(self, t: TargetPlan) -> bool:
        """The target's assets can start: every program its indexes embed with has settled, none of its units
        has failed so far."""
        if t.profile in self.skip or self._failed(t, self.units):
            return False
        indexes = [a for a in t.assets if isinstance(a, IndexAssetPlan)]
        embedders = {u.label for u in t.units if any(a.model == u.model for a in indexes)}
        return (embedders <= self.units.keys()
                and all(a.reference is None or a.reference.program_key in self.references for a in indexes))

    @staticmethod
    def _failed(t: TargetPlan, results: dict[str, UnitResult]) -> bool:
        return any(results[u.label].status == "failed" for u in t.units if u.label in results)

    def _start(self, t: TargetPlan) -> None:
        from deployc.packaging.assets import build_assets  # packaging imports flatbuffers (and numpy)

        programs = {label: r for label, r in self.units.items() if r.unit.target == t.target}  # build_assets: by model
        self.assets[t.profile] = self._assets.submit(build_assets, self.plan, t, programs, dict(self.references),
                                                     self.cache, self.say)
