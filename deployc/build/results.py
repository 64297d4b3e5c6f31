"""The records a build hands on: the job a worker gets and the result it returns, the judged result of
every unit, and the build report (`deployc build --json` prints it)."""

from __future__ import annotations

from typing import Any, Literal

from deployc.core.errors import Location
from deployc.core.facts import (
    MethodCalls,
    PointMetrics,
    ProgramFacts,
    Summary,
    TaskMetrics,
    TextMetrics,
    TokenParity,
)
from deployc.core.records import Frozen
from deployc.plan.build_plan import UnitPlan
from deployc.plan.releases import ReleaseStatus

Status = Literal["built", "cached", "failed"]


class WorkerJob(Frozen):
    """One program to build: plain data, so it crosses any process or machine boundary."""

    unit: UnitPlan
    cache: str  # where to put it: a local cache directory or a shared cache URL
    folder: str  # the manifest's folder: model code, checkpoints, calibration data
    log_dir: str | None  # the unit's log file goes here; None leaves the output where it is (--verbose)


class Node(Frozen):
    """Where a program was built."""

    executor: Literal["local", "ray"]
    host: str
    pid: int
    node_id: str | None = None
    address: str | None = None


class WorkerResult(Frozen):
    key: str
    status: Status
    step: str | None = None  # where it failed
    error: str | None = None
    dim: str | None = None  # the manifest dim the failure is about (torch.export refused its range)
    warning: str | None = None  # e.g. a corrupt cache entry that was discarded
    log: str | None = None  # what the libraries printed while it built
    node: Node | None = None
    attempts: int = 0  # worker processes that started it: more than 1 means a dead one was replaced
    files: dict[str, tuple[bytes, str]] | None = None  # name -> (bytes, sha256), when no shared cache carries them


class Tolerance(Frozen):
    min_cosine: float
    min_sqnr_db: float
    max_abs: float | None
    tokens: int = 0  # leading greedy tokens that must equal eager's (text-generation programs)
    max_perplexity_ratio: float | None = None  # text-generation programs on held-out text
    max_kl: float | None = None
    min_top1: float | None = None  # text-generation on held-out text; classifiers on `verify.data`
    min_topk_overlap: float | None = None  # embedders on `verify.data`


class Verification(Frozen):
    status: Literal["passed", "failed", "not-run"]
    reason: str = ""
    metrics: Summary | None = None
    points: list[PointMetrics] = []
    tokens: TokenParity | None = None
    text: TextMetrics | None = None
    text_reason: str = ""  # why a text-generation program has no text figures
    task: TaskMetrics | None = None  # the task measure on the manifest's samples (`verify.data`)
    ran_on: str = ""  # "": the program in this host's runtime; else what ran its lowered graph instead
    method_calls: dict[str, MethodCalls] = {}  # a static decoder's methods: calls made and their seconds here
    tolerance: Tolerance


class Arm64Check(Frozen):
    """The program run again by ExecuTorch's arm64 runtime (the aarch64 wheel's XNNPACK and kernels) under
    qemu-aarch64 on its self-test vectors, judged against eager PyTorch with the unit's tolerances."""

    status: Literal["passed", "failed", "not-run"]
    reason: str = ""
    cpu: str = ""  # the emulated CPU model (qemu-aarch64 -cpu)
    cases: int = 0  # the self-test cases run: the verification points whose tensors fit the vectors
    # A decoder's verification points the check did not run, to fit its budget (Verify.arm64_points)
    left_out: list[dict[str, int]] = []
    metrics: Summary | None = None
    text: TextMetrics | None = None
    cached: bool = False  # the same program on the same runner was measured before (cache kind "arm64")
    seconds: float = 0.0  # what running it under qemu took (0 when cached)


class Failure(Frozen):
    step: str
    error: str
    at: Location | None = None  # the manifest entry the failure is about, when there is one
    log: str | None = None  # the unit's log file, when the libraries' output went to one


class Fallback(Frozen):
    """A unit the build tried first, whose backend could not build the model."""

    unit: str
    backend: str
    step: str
    error: str  # the first line of its error


class CandidateResult(Frozen):
    """One scheme a unit choosing by measurement verified (or did not need to), for the report."""

    scheme: str
    program_key: str
    status: Literal["passed", "failed", "not-tried"]  # not-tried: a cheaper candidate passed first (by: size)
    chosen: bool = False
    size_bytes: int | None = None
    latency_ms: float | None = None
    metrics: Summary | None = None
    text: TextMetrics | None = None
    task: TaskMetrics | None = None
    step: str | None = None  # where a failed candidate failed, and the first line of why
    error: str | None = None


class UnitResult(Frozen):
    unit: UnitPlan  # the unit it was built on (a fallback when the planned one failed)
    status: Status
    failure: Failure | None = None
    facts: ProgramFacts | None = None
    verification: Verification | None = None
    arm64: Arm64Check | None = None  # programs for an arm64 device's CPU (Verify.arm64_cpu)
    program: str | None = None  # the .pte in the cache
    node: Node | None = None
    attempts: int = 0
    fallbacks: list[Fallback] = []  # units tried before, in order, and why each failed
    candidates: list[CandidateResult] = []  # with a choice of schemes: every candidate of the chosen unit

    def to_json(self) -> dict[str, Any]:
        f = self.facts
        return {
            "model": self.unit.model, "target": self.unit.target, "unit": self.unit.unit,
            "backend": self.unit.backend, "quantization": self.unit.quantization, "status": self.status,
            "program_key": self.unit.program_key,
            "pte": self.program,
            "size_bytes": f.size_bytes if f else None,
            "planned_memory_bytes": {m: v.planned_memory_bytes for m, v in f.methods.items()} if f else {},
            "delegated_share": f.delegated_share if f else None,
            "delegates": f.delegates if f else None,
            "non_delegated_ops": f.non_delegated_ops if f else None,
            "float_ops": f.float_ops if f else None,
            "scratch_bytes": f.scratch_bytes if f else None,
            "stayed_float": f.stayed_float if f else None,
            "float_fallback": f.float_fallback.model_dump(mode="json") if f and f.float_fallback else None,
            "verification": self.verification.model_dump(mode="json") if self.verification else None,
            "arm64": self.arm64.model_dump(mode="json") if self.arm64 else None,
            "latency_ms": f.measurement.latency_ms if f else None,
            "durations_s": f.durations_s if f else None,
            "built_on": self.node.model_dump(mode="json", exclude_none=True) if self.node else None,
            "attempts": self.attempts,
            "fell_back_from": [f.model_dump(mode="json") for f in self.fallbacks],
            "choice": ({"by": self.unit.choice.by, "auto": self.unit.choice.auto,
                        "passed_over": [p.model_dump(mode="json") for p in self.unit.choice.passed_over]}
                       if self.unit.choice else None),
            "candidates": [c.model_dump(mode="json", exclude_none=True) for c in self.candidates],
            "failure": ({"step": self.failure.step, "error": self.failure.error,
                         **({"at": str(self.failure.at)} if self.failure.at else {}),
                         **({"log": self.failure.log} if self.failure.log else {})} if self.failure else None),
        }


class BundleResult(Frozen):
    dir: str
    archive: str


class EtrecordResult(Frozen):
    """deployc build --etrecord: one shipped program's ETRecord."""

    target: str
    program: str
    path: str | None = None  # DIR/<target>/<program>.etrecord
    cached: bool = False  # recorded by an earlier build
    reason: str = ""  # why there is none


class BuildReport(Frozen):
    units: list[UnitResult]
    bundles: dict[str, BundleResult]  # profile -> where its bundle was written
    bundles_not_written: dict[str, str]  # profile -> why not
    releases: list[ReleaseStatus] = []  # what the plan expected of each release before building
    reproducible: bool | None = None  # --check-reproducible
    differences: list[str] | None = None
    etrecords: list[EtrecordResult] | None = None  # --etrecord

    @property
    def failed(self) -> list[UnitResult]:
        return [u for u in self.units if u.status == "failed"]

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "units": [u.to_json() for u in self.units],
            "bundles": {t: b.model_dump(mode="json") for t, b in self.bundles.items()},
            "bundles_not_written": self.bundles_not_written, "ok": not self.failed}
        if self.reproducible is not None:
            out.update({"reproducible": self.reproducible, "differences": self.differences})
        if self.etrecords is not None:
            out["etrecords"] = [e.model_dump(mode="json") for e in self.etrecords]
        return out
