"""Self-test vectors: a few inputs of a program and the outputs eager PyTorch computed for them, so an
app (or `deployc inspect --self-test`) can check on first start that the device computes what the build
verified. One JSON file per program (docs/bundle.md, "Self-test vectors"); tensors are base64 of their
little-endian bytes, so a C++ reader needs nothing but a JSON parser."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

SELF_TEST_FILE = "selftest.json"  # beside program.pte in the program cache
SCHEMA_VERSION = 1
MAX_BYTES = 4 << 20  # cases are kept in order while their tensors fit (at least one): bundles stay small
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


def write(path: Path, cases: list[tuple[str, dict[str, int], list[Any], list[Any]]]) -> None:
    """cases: (method, dims, inputs, eager outputs), in the order the build verified them."""
    kept: list[dict[str, Any]] = []
    total = 0
    for method, dims, inputs, outputs in cases:
        encoded_in, encoded_out = [encode_tensor(t) for t in inputs], [encode_tensor(t) for t in outputs]
        case = {"method": method, "dims": dims, "inputs": encoded_in, "expected": encoded_out}
        size = sum(len(t["data"]) for t in encoded_in + encoded_out)
        if kept and total + size > MAX_BYTES:
            continue
        kept.append(case)
        total += size
    path.write_text(json.dumps({"schema_version": SCHEMA_VERSION, "cases": kept}, sort_keys=True) + "\n")


def read(path: Path) -> list[dict[str, Any]]:
    doc = json.loads(path.read_text())
    if doc.get("schema_version") != SCHEMA_VERSION:
        raise ValueError(f"{path.name}: self-test schema version {doc.get('schema_version')} is not "
                         f"{SCHEMA_VERSION}")
    return list(doc["cases"])
