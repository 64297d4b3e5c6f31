"""Shared building blocks of the manifest and profile schemas."""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, PlainSerializer, WithJsonSchema


class Frozen(BaseModel):
    """Every schema node: immutable, unknown keys refused."""

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)


_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(B|KB|MB|GB|TB|KiB|MiB|GiB|TiB)?\s*$")
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
        m = _SIZE.match(value)
        if m:
            return int(float(m.group(1)) * _UNIT[m.group(2)])
    raise ValueError(f"{value!r} is not a size; write e.g. 2GiB, 786KiB, 1.5MB or a number of bytes")


def format_size(n: int) -> str:
    for unit, factor in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= factor:
            return f"{n / factor:.2f} {unit}"
    return f"{n} B"


ByteSize = Annotated[
    int,
    BeforeValidator(parse_size),
    PlainSerializer(lambda v: v, return_type=int),
    WithJsonSchema({"anyOf": [{"type": "integer", "minimum": 0},
                              {"type": "string", "pattern": _SIZE.pattern}],
                    "description": "bytes, or a size such as 2GiB, 786KiB, 1.5MB"}),
]

Identifier = Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")]
