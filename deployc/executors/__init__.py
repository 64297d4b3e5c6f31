"""Where the units of a plan are built.

`local`: a pool of worker processes on this machine (`--jobs`). `ray`: one Ray task per unit on a Ray
cluster (`--ray-address`, or a cluster started for the build). Both hand the same payload to
program_builder.build_program and return its result dicts, each with the node that built the unit
and how many attempts it took. The driver plans, judges and packages; executors only build.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from deployc.cache import Cache
from deployc.plan import UnitPlan
from deployc.project import Project

Progress = Callable[[str], None]


class Executor(Protocol):
    def describe(self, units: int) -> str:
        """How the units will be built, for the progress line."""
        ...

    def run(self, todo: list[UnitPlan], project: Project, cache: Cache,
            progress: Progress) -> dict[str, dict[str, Any]]:
        """Build every unit into `cache`; results keyed by program key."""
        ...


def payload(unit: UnitPlan, cache_spec: str | None, manifest_dir: str | None) -> dict[str, Any]:
    """What a worker needs to build one unit: plain data, so it crosses any process boundary."""
    return {"unit": unit.model_dump(mode="json"), "cache": cache_spec, "manifest_dir": manifest_dir,
            "label": unit.label}


def make_executor(name: str, jobs: int, ray_address: str | None = None) -> Executor:
    if name == "ray":
        from deployc.executors.ray_cluster import RayExecutor

        return RayExecutor(ray_address, jobs)
    from deployc.executors.local import LocalExecutor

    return LocalExecutor(jobs)
