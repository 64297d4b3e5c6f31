"""`deployc build --etrecord DIR`: ExecuTorch's ETRecord of every program a bundle ships, for Model
Explorer and ExecuTorch's Inspector (they map an ETDump's events onto the program's graph by it).

An ETRecord is not part of a program's key or of a bundle (bundles stay byte-identical whether or not
one was asked for). A program's ETRecord is made by lowering the program again with the record on and
kept only when that program's bytes equal the cached program's: then it describes exactly what ships.
It is cached beside the programs (kind `etrecords`, by program key), so asking again builds nothing.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from deployc.build.cache import Cache, Entry
from deployc.build.results import BuildReport, EtrecordResult, UnitResult
from deployc.core.atomic import write_atomic
from deployc.core.digests import file_sha256
from deployc.core.errors import BuildError
from deployc.core.events import Say
from deployc.core.facts import ETRECORD_FILE, PROGRAM_FILE, program_file
from deployc.graph import etrecord_worker
from deployc.plan.build_plan import BuildPlan
from deployc.targets.backends import BACKENDS

RECORD_TIMEOUT_S = 3600


def write_etrecords(plan: BuildPlan, report: BuildReport, cache: Cache, out: Path, say: Say) -> list[EtrecordResult]:
    """For each written bundle's programs: DIR/<target>/<program>.etrecord."""
    records = cache.of_kind("etrecords")
    results = []
    for u in report.units:
        if u.unit.target not in report.bundles:
            continue
        base = EtrecordResult(target=u.unit.target, program=u.unit.model)
        if program_file(BACKENDS[u.unit.backend].format) != PROGRAM_FILE:
            why = f"a {u.unit.backend} program: ETRecords are ExecuTorch's"
            results.append(base.model_copy(update={"reason": why}))
            continue
        key = u.unit.program_key
        program, _ = cache.get(key)
        if program is None:
            raise BuildError(f"{u.unit.label}: program {key[:12]} is not in the cache to record")
        entry, _ = records.get(key)
        cached = entry is not None
        if entry is None:
            say(f"etrecord {u.unit.label}: lowering the program again with its record on")
            entry = _record(plan, u, program, cache, records)
        dest = out / u.unit.target / f"{u.unit.model}.etrecord"
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(entry.file(ETRECORD_FILE), dest)
        # What ties the record to its program: deployc profile uses it only beside the same bytes.
        write_atomic(dest.with_name(dest.name + ".json"), json.dumps({
            "program": u.unit.model, "program_key": key,
            "program_sha256": program.files[PROGRAM_FILE]["sha256"]}, indent=2) + "\n")
        results.append(base.model_copy(update={"path": str(dest), "cached": cached}))
    return results


def _record(plan: BuildPlan, u: UnitResult, program: Entry, cache: Cache, records: Cache) -> Entry:
    from deployc.graph.verify import crash_reason

    key = u.unit.program_key
    with records.lock(key):
        staging = records.tmp_dir()
        unit_file = staging / "unit.json"
        unit_file.write_text(u.unit.model_dump_json())
        env = {**os.environ, **BACKENDS[u.unit.backend].child_env()}
        log = cache.log_dir / f"{u.unit.slug}.etrecord.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        try:
            try:
                with log.open("w") as out:
                    proc = subprocess.run([sys.executable, "-m", etrecord_worker.__name__, str(unit_file),
                                           str(plan.folder), str(staging)], stdout=out, stderr=subprocess.STDOUT,
                                          env=env, timeout=RECORD_TIMEOUT_S, text=True)
            except subprocess.TimeoutExpired as exc:
                raise BuildError(f"{u.unit.label}: recording its ETRecord did not finish within "
                                 f"{RECORD_TIMEOUT_S} s (log: {log})") from exc
            if proc.returncode != 0:
                raise BuildError(f"{u.unit.label}: recording its ETRecord failed: "
                                 f"{crash_reason(log.read_text(), proc.returncode)} (log: {log})")
            again, cached = file_sha256(staging / PROGRAM_FILE), file_sha256(program.file(PROGRAM_FILE))
            if again != cached:
                raise BuildError(f"{u.unit.label}: lowered again for its ETRecord, the program came out different "
                                 f"(sha256 {again[:12]}, cached {cached[:12]}): an ETRecord of it would not describe "
                                 "the shipped program")
            for f in staging.iterdir():
                if f.name != ETRECORD_FILE:
                    f.unlink() if f.is_file() else shutil.rmtree(f)
            return records.put(key, staging)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
