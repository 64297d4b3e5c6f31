"""Turn pydantic's validation errors into located, human diagnostics with 'did you mean' hints."""

from __future__ import annotations

import difflib
import re
import types
import typing
from collections.abc import Iterable
from typing import Any

from pydantic import BaseModel, ValidationError

from deployc.core.errors import Diagnostic
from deployc.core.yaml_io import Document, PathKey


def closest(word: str, choices: Iterable[str]) -> str | None:
    match = difflib.get_close_matches(str(word), [str(c) for c in choices], n=1, cutoff=0.6)
    return f"did you mean '{match[0]}'?" if match else None


def dotted(path: PathKey) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(top level)"


def _data_path(data: Any, loc: tuple[Any, ...]) -> PathKey:
    """The part of pydantic's loc that exists in the data, plus a final missing/unknown key.

    pydantic adds union-member and validator tags to locs; those are skipped."""
    path: list[str | int] = []
    node = data
    for part in loc:
        if isinstance(node, dict) and isinstance(part, str) and part in node:
            node = node[part]
            path.append(part)
        elif isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node):
            node = node[part]
            path.append(part)
    return tuple(path)


def _unwrap(tp: Any) -> list[Any]:
    """The concrete types an annotation may hold (through Optional, Annotated, unions)."""
    origin = typing.get_origin(tp)
    if origin is typing.Annotated:
        return _unwrap(typing.get_args(tp)[0])
    if origin in (typing.Union, types.UnionType):
        return [t for a in typing.get_args(tp) for t in _unwrap(a)]
    return [tp]


def fields_at(model: type[BaseModel], path: PathKey) -> list[str]:
    """Field names (aliases where set) accepted by the mapping at `path`."""
    current: list[Any] = [model]
    for part in path:
        nxt: list[Any] = []
        for tp in current:
            for t in _unwrap(tp):
                origin = typing.get_origin(t)
                if isinstance(t, type) and issubclass(t, BaseModel):
                    for name, f in t.model_fields.items():
                        if part in (name, f.alias):
                            nxt.append(f.annotation)
                elif origin is dict:
                    nxt.append(typing.get_args(t)[1])
                elif origin in (list, tuple) and isinstance(part, int):
                    nxt.append(typing.get_args(t)[0])
        current = nxt
    names: list[str] = []
    for tp in current:
        for t in _unwrap(tp):
            if isinstance(t, type) and issubclass(t, BaseModel):
                names.extend(f.alias or n for n, f in t.model_fields.items())
    return names


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _choices(expected: str) -> list[str]:
    return re.findall(r"'([^']*)'", expected)


def diagnostics_from(exc: ValidationError, doc: Document, model: type[BaseModel]) -> list[Diagnostic]:
    out: list[Diagnostic] = []
    seen: set[tuple[Any, ...]] = set()
    for e in exc.errors(include_url=False):
        path = _data_path(doc.data, tuple(e["loc"]))
        kind = e["type"]
        msg = e["msg"]
        hint: str | None = None
        if kind == "extra_forbidden":
            key = path[-1] if path else e["loc"][-1]
            parent = path[:-1]
            valid = fields_at(model, parent)
            text = f"{dotted(parent)}: unknown field '{key}'"
            hint = closest(str(key), valid)
            if valid:
                hint = (hint + " " if hint else "") + "valid fields: " + ", ".join(valid)
            loc = doc.locate(path, key=True)
        elif kind == "missing":
            key = e["loc"][-1]
            text = f"{dotted(path)}: missing required field '{key}'"
            loc = doc.locate(path, key=True)
        elif kind == "union_tag_invalid":
            ctx = e.get("ctx", {})
            field = str(ctx.get("discriminator", "")).strip("'")
            path = (*path, field) if field else path
            loc = doc.locate(path)
            choices = _choices(ctx.get("expected_tags", ""))
            text = f"{dotted(path)}: {ctx.get('tag')!r} is not one of: {', '.join(choices)}"
            hint = closest(str(ctx.get("tag")), choices)
        else:
            loc = doc.locate(path)
            if kind == "literal_error":
                choices = _choices(e.get("ctx", {}).get("expected", ""))
                text = f"{dotted(path)}: {_short(e['input'])} is not one of: {', '.join(choices)}"
                hint = closest(str(e["input"]), choices)
            elif kind == "value_error":
                text = f"{dotted(path)}: {msg.removeprefix('Value error, ')}"
            elif kind == "string_pattern_mismatch":
                pattern = e.get("ctx", {}).get("pattern", "")
                text = f"{dotted(path)}: {_short(e['input'])} does not match the pattern {pattern}"
            elif kind in ("dict_type", "model_type", "model_attributes_type"):
                text = f"{dotted(path)}: expected a mapping, got {_short(e['input'])}"
            elif kind in ("list_type", "tuple_type"):
                text = f"{dotted(path)}: expected a list, got {_short(e['input'])}"
            else:
                text = f"{dotted(path)}: {msg[0].lower() + msg[1:]}, got {_short(e['input'])}"
        if (loc, text) in seen:
            continue
        seen.add((loc, text))
        out.append(Diagnostic(loc, text, hint))
    return sorted(out, key=lambda d: (d.location.line, d.location.col, d.message))
