"""Self-test vectors: a few inputs of a program and the outputs eager PyTorch computed for them, so an
app (or `deployc inspect --self-test`) can check on first start that the device computes what the build
verified. One JSON file per program (docs/bundle.md, "Self-test vectors"); tensors are base64 of their
little-endian bytes, so a C++ reader needs nothing but a JSON parser."""

from __future__ import annotations

import base64
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

SELF_TEST_FILE = "selftest.json"  # beside program.pte in the program cache
SCHEMA_VERSION = 3  # 2: a decoder's held-out text cases carry `target`; 3: task samples carry `task`
MAX_BYTES = 4 << 20  # cases are kept in order while their tensors fit (at least one): bundles stay small
# A decoder's held-out text cases: at least this many, more while they fit in TEXT_BYTES (a 4,096-token
# vocabulary: 94 positions; a 32k one: 12).
MIN_TEXT_POSITIONS = 8
TEXT_BYTES = 2 << 20
TASK_BYTES = 2 << 20  # the manifest's task samples (verify.data): all of them or none (a subset measures else)
DTYPES = {"float32": "<f4", "int64": "<i8", "int32": "<i4", "bool": "|b1"}


def encode_tensor(value: Any) -> dict[str, Any]:
    import numpy as np

    a = np.asarray(value.detach().numpy() if hasattr(value, "detach") else value)
    if a.dtype.name not in DTYPES:
        a = a.astype(np.float32)
    data = np.ascontiguousarray(a.astype(DTYPES[a.dtype.name]))
    return {"dtype": a.dtype.name, "shape": list(a.shape), "data": base64.b64encode(data.tobytes()).decode()}


def decode_tensor(entry: dict[str, Any]) -> Any:
    import numpy as np

    raw = base64.b64decode(entry["data"])
    return np.frombuffer(raw, dtype=DTYPES[entry["dtype"]]).reshape(entry["shape"]).copy()


def _case(method: str, dims: dict[str, int], inputs: list[Any], outputs: list[Any]) -> dict[str, Any]:
    return {"method": method, "dims": dims, "inputs": [encode_tensor(t) for t in inputs],
            "expected": [encode_tensor(t) for t in outputs]}


def _size(case: dict[str, Any]) -> int:
    return sum(len(t["data"]) for t in case["inputs"] + case["expected"])


def write(path: Path, cases: list[tuple[str, dict[str, int], list[Any], list[Any]]],
          windows: Sequence[list[tuple[str, dict[str, int], list[Any], list[Any], int]]] = (),
          task: tuple[dict[str, Any], list[tuple[str, dict[str, int], list[Any], list[Any]]]] | None = None) -> int:
    """cases: (method, dims, inputs, eager outputs), in the order the build verified them. windows: a
    decoder's held-out text, each a run of calls from position 0 with the token each call's logits should
    predict (`target`): kept in order while they fit in TEXT_BYTES, at least MIN_TEXT_POSITIONS (a run cut
    short is still the program's state from position 0; one with a call left out in its middle would not
    be). task: the measure ({"measure": "top1"|"topk", "k": K}) and the task samples' cases, each kept
    with `task` set to the measure, all of them when they fit in TASK_BYTES, else none (the measure over
    a subset is another measure). Returns how many text positions were kept: the build judges the program
    on those too."""
    kept: list[dict[str, Any]] = []
    total = 0
    for method, dims, inputs, outputs in cases:
        case = _case(method, dims, inputs, outputs)
        if kept and total + _size(case) > MAX_BYTES:
            continue
        kept.append(case)
        total += _size(case)
    text = [{**_case(m, d, i, o), "target": int(t)} for window in windows for m, d, i, o, t in window]
    budget, positions = total + TEXT_BYTES, 0
    for case in text:
        if positions >= MIN_TEXT_POSITIONS and total + _size(case) > budget:
            break
        kept.append(case)
        total += _size(case)
        positions += 1
    if task is not None:
        measure, samples = task
        task_cases = [{**_case(m, d, i, o), "task": measure} for m, d, i, o in samples]
        if sum(_size(c) for c in task_cases) <= TASK_BYTES:
            kept += task_cases
    path.write_text(json.dumps({"schema_version": SCHEMA_VERSION, "cases": kept}, sort_keys=True) + "\n")
    return positions


def read(path: Path) -> list[dict[str, Any]]:
    doc = json.loads(path.read_text())
    if doc.get("schema_version") not in (1, 2, SCHEMA_VERSION):
        raise ValueError(f"{path.name}: self-test schema version {doc.get('schema_version')} is not "
                         f"{SCHEMA_VERSION}")
    return list(doc["cases"])
