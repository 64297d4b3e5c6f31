"""Byte sizes as people write and read them: '2GiB', '786KiB', '1.5MB'."""

from __future__ import annotations

import re
from typing import Any

SIZE_PATTERN = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(B|KB|MB|GB|TB|KiB|MiB|GiB|TiB)?\s*$")
_UNIT = {
    None: 1, "B": 1,
    "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12,
    "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40,
}


def parse_size(value: Any) -> int:
    """'2GiB', '786KiB', '1.5MB' or a plain integer number of bytes."""
    if isinstance(value, bool):
        raise ValueError("expected a size such as 2GiB, 786KiB or a number of bytes")
    if isinstance(value, int):
        if value < 0:
            raise ValueError("a size cannot be negative")
        return value
    if isinstance(value, str):
        m = SIZE_PATTERN.match(value)
        if m:
            return int(float(m.group(1)) * _UNIT[m.group(2)])
    raise ValueError(f"{value!r} is not a size; write e.g. 2GiB, 786KiB, 1.5MB or a number of bytes")


def format_size(n: int) -> str:
    for unit, factor in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= factor:
            return f"{n / factor:.2f} {unit}"
    return f"{n} B"
