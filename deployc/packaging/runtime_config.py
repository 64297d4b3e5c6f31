"""runtime.bin <-> the runtime config as plain data, driven by runtime_config.fbs itself.

The .fbs is the single source of truth: this module reads its tables (a small subset of the
FlatBuffers schema language: tables of scalars, strings, tables and vectors of those) and writes or
reads buffers with the `flatbuffers` package. No generated code to drift from the schema.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import flatbuffers
from flatbuffers import number_types as nt
from flatbuffers.table import Table

from deployc.core.errors import DeploycError

SCHEMA_PATH = Path(__file__).with_name("runtime_config.fbs")
SCHEMA_VERSION = 2  # 2: static_decoder.prefix_token

_SCALARS: dict[str, tuple[str, Any]] = {  # fbs type -> (Builder.Prepend<X>Slot suffix, number_types flags)
    "bool": ("Bool", nt.BoolFlags), "int": ("Int32", nt.Int32Flags), "uint": ("Uint32", nt.Uint32Flags),
    "long": ("Int64", nt.Int64Flags), "ulong": ("Uint64", nt.Uint64Flags), "double": ("Float64", nt.Float64Flags),
    "float": ("Float32", nt.Float32Flags),
}


@dataclass(frozen=True)
class Field:
    name: str
    type: str  # a scalar name, "string", or a table name
    vector: bool
    default: Any


@dataclass(frozen=True)
class Schema:
    tables: dict[str, tuple[Field, ...]]
    root: str
    identifier: bytes


@cache
def schema() -> Schema:
    text = re.sub(r"//[^\n]*", "", SCHEMA_PATH.read_text())
    tables: dict[str, tuple[Field, ...]] = {}
    for name, body in re.findall(r"table\s+(\w+)\s*\{(.*?)\}", text, re.S):
        fields = []
        for fname, ftype, default in re.findall(r"(\w+)\s*:\s*(\[?\w+\]?)\s*(?:=\s*([^;]+))?;", body):
            vector = ftype.startswith("[")
            base = ftype.strip("[]")
            value: Any = None
            if base in _SCALARS:
                raw = (default or "0").strip()
                value = raw == "true" if base == "bool" else float(raw) if base in ("double", "float") else int(raw)
            fields.append(Field(fname, base, vector, value))
        tables[name] = tuple(fields)
    root = re.search(r"root_type\s+(\w+)\s*;", text)
    ident = re.search(r'file_identifier\s+"(\w{4})"\s*;', text)
    assert root and ident, "runtime_config.fbs lacks root_type or file_identifier"
    return Schema(tables, root.group(1), ident.group(1).encode())


def normalize(data: dict[str, Any], table: str | None = None) -> dict[str, Any]:
    """`data` as `flatc --json --defaults-json` would print it: every scalar present (defaults filled in),
    absent strings/tables/vectors left out, unknown keys refused."""
    s = schema()
    table = table or s.root
    fields = {f.name: f for f in s.tables[table]}
    unknown = set(data) - set(fields)
    if unknown:
        raise ValueError(f"{table}: fields not in runtime_config.fbs: {', '.join(sorted(unknown))}")
    out: dict[str, Any] = {}
    for f in s.tables[table]:
        v = data.get(f.name)
        if f.type in _SCALARS and not f.vector:
            out[f.name] = f.default if v is None else v
        elif v is None:
            continue
        elif f.type in s.tables:
            out[f.name] = [normalize(x, f.type) for x in v] if f.vector else normalize(v, f.type)
        else:
            out[f.name] = list(v) if f.vector else v
    return out


def _offsets_vector(b: flatbuffers.Builder, offsets: list[int]) -> int:
    b.StartVector(4, len(offsets), 4)
    for o in reversed(offsets):
        b.PrependUOffsetTRelative(o)
    return b.EndVector()


def _write(b: flatbuffers.Builder, table: str, data: dict[str, Any]) -> int:
    s = schema()
    fields = s.tables[table]
    children: dict[int, int] = {}
    for i, f in enumerate(fields):  # children first: a table cannot be built while another is open
        v = data.get(f.name)
        if v is None or (f.type in _SCALARS and not f.vector):
            continue
        if f.type == "string":
            children[i] = _offsets_vector(b, [b.CreateString(x) for x in v]) if f.vector else b.CreateString(v)
        elif f.type in s.tables:
            children[i] = _offsets_vector(b, [_write(b, f.type, x) for x in v]) if f.vector else _write(b, f.type, v)
        else:
            raise ValueError(f"{table}.{f.name}: vectors of scalars are not supported")
    b.StartObject(len(fields))
    for i, f in enumerate(fields):
        if i in children:
            b.PrependUOffsetTRelativeSlot(i, children[i], 0)
        elif f.type in _SCALARS and not f.vector:
            v = data.get(f.name, f.default)
            getattr(b, f"Prepend{_SCALARS[f.type][0]}Slot")(i, v, f.default)
    return b.EndObject()


def encode(config: dict[str, Any]) -> bytes:
    s = schema()
    b = flatbuffers.Builder(1024)
    root = _write(b, s.root, normalize(config))
    b.Finish(root, file_identifier=s.identifier)
    return bytes(b.Output())


def _read(buf: bytes, pos: int, table: str) -> dict[str, Any]:
    s = schema()
    t = Table(bytearray(buf), pos)
    out: dict[str, Any] = {}
    for i, f in enumerate(s.tables[table]):
        o = t.Offset(4 + 2 * i)
        if f.type in _SCALARS and not f.vector:
            out[f.name] = t.Get(_SCALARS[f.type][1], o + t.Pos) if o else f.default
            continue
        if not o:
            continue
        if f.vector:
            start, n = t.Vector(o), t.VectorLen(o)
            items = [start + 4 * j for j in range(n)]
            out[f.name] = [t.String(x).decode() if f.type == "string" else _read(buf, t.Indirect(x), f.type)
                           for x in items]
        elif f.type == "string":
            out[f.name] = t.String(o + t.Pos).decode()
        else:
            out[f.name] = _read(buf, t.Indirect(o + t.Pos), f.type)
    return out


class ConfigError(DeploycError):
    """runtime.bin is not a runtime config this deployc reads (a foreign file, a newer schema). Exit 2."""

    exit_code = 2


def decode(buf: bytes) -> dict[str, Any]:
    """runtime.bin -> data; refuses a foreign file or a newer schema."""
    s = schema()
    if len(buf) < 8 or buf[4:8] != s.identifier:
        raise ConfigError(f"not a deployc runtime config (file identifier {bytes(buf[4:8])!r}, "
                          f"expected {s.identifier!r})")
    root = flatbuffers.encode.Get(flatbuffers.packer.uoffset, bytearray(buf), 0)
    data = _read(buf, root, s.root)
    if data["schema_version"] > SCHEMA_VERSION:
        raise ConfigError(f"runtime config schema version {data['schema_version']} is newer than this deployc "
                          f"understands ({SCHEMA_VERSION}); upgrade deployc")
    return data
