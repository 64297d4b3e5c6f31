"""Bundles damaged on purpose, consistently: what only the numbers (a self-test) can catch."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from deployc.core.digests import bytes_sha256
from deployc.packaging.runtime_config import encode


def flip_weight_byte(bundle: Path, program: str) -> None:
    """Flip the exponent byte of the program's last weight-like float and rewrite runtime.json,
    runtime.bin and the lock to match: only the numbers can tell."""
    pte = bundle / f"{program}.pte"
    data = bytearray(pte.read_bytes())
    floats = np.frombuffer(bytes(data[: len(data) // 4 * 4]), dtype="<f4")
    last = max(i for i in range(len(floats)) if 1e-3 < abs(floats[i]) < 4.0)  # the data segments come last
    data[last * 4 + 3] ^= 0x40  # high exponent bits: that weight becomes ~1e38 times larger
    pte.write_bytes(bytes(data))
    config = json.loads((bundle / "runtime.json").read_text())
    next(p for p in config["programs"] if p["name"] == program)["sha256"] = bytes_sha256(bytes(data))
    rewrite_config(bundle, config, pte.name)


def rewrite_config(bundle: Path, config: dict, *changed: str) -> None:
    """runtime.json and runtime.bin rewritten as `config`, and the lock made to match them and `changed`."""
    (bundle / "runtime.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    (bundle / "runtime.bin").write_bytes(encode(config))
    lock = json.loads((bundle / "bundle.lock.json").read_text())
    for name in ("runtime.json", "runtime.bin", *changed):
        raw = (bundle / name).read_bytes()
        lock["files"][name] = {"sha256": bytes_sha256(raw), "size": len(raw)}
    (bundle / "bundle.lock.json").write_text(json.dumps(lock, indent=2, sort_keys=True) + "\n")
