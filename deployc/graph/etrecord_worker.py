"""Lower one program again with its ETRecord on, in its own process (deployc/build/etrecords.py):
    python -m deployc.graph.etrecord_worker UNIT_JSON FOLDER STAGING
writes STAGING/program.pte and STAGING/program.etrecord (and the build's other files)."""

from __future__ import annotations

import sys
from pathlib import Path


def main(argv: list[str]) -> int:
    from deployc.graph.worker import record
    from deployc.plan.build_plan import UnitPlan

    unit_file, folder, staging = argv
    record(UnitPlan.model_validate_json(Path(unit_file).read_text()), Path(folder), Path(staging))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
