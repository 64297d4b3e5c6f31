"""Safe YAML loading that remembers where every node came from.

We compose the node graph ourselves (instead of yaml.safe_load) so that every key and value
keeps its line/column, duplicate keys are caught, and hostile documents (alias bombs, deep
nesting, huge files) are refused quickly with bounded memory.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from yaml.constructor import SafeConstructor
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from deployc.core.digests import bytes_sha256
from deployc.core.errors import Diagnostic, Location, UserError

MAX_BYTES = 1 << 20  # a manifest is a page or two; a megabyte is already absurd
MAX_NODES = 100_000  # counts alias expansions, which is what stops a billion-laughs document
MAX_DEPTH = 64

PathKey = tuple[str | int, ...]

_MAP_TAG = "tag:yaml.org,2002:map"
_SEQ_TAG = "tag:yaml.org,2002:seq"
_SAFE_SCALAR_TAGS = {
    "tag:yaml.org,2002:str",
    "tag:yaml.org,2002:int",
    "tag:yaml.org,2002:float",
    "tag:yaml.org,2002:bool",
    "tag:yaml.org,2002:null",
}


@dataclass(frozen=True)
class Document:
    """Plain data from one YAML file plus the location of every value and every key."""

    path: Path
    data: Any
    values: dict[PathKey, Location] = field(default_factory=dict)
    keys: dict[PathKey, Location] = field(default_factory=dict)
    sha256: str = ""  # of the file's bytes (its UTF-8 text)

    def locate(self, path: PathKey, *, key: bool = False) -> Location:
        """The location of `path`, or of its nearest ancestor that has one."""
        table = self.keys if key else self.values
        probe = tuple(path)
        while True:
            if probe in table:
                return table[probe]
            if key and probe in self.values:
                return self.values[probe]
            if not probe:
                return Location(str(self.path), 1, 1)
            probe = probe[:-1]


def _loc(path: Path, node: Node) -> Location:
    return Location(str(path), node.start_mark.line + 1, node.start_mark.column + 1)


class _Converter:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.values: dict[PathKey, Location] = {}
        self.keys: dict[PathKey, Location] = {}
        self.count = 0
        self.scalars = SafeConstructor()

    def fail(self, node: Node, message: str, hint: str | None = None) -> UserError:
        return UserError([Diagnostic(_loc(self.path, node), message, hint)])

    def convert(self, node: Node, at: PathKey, depth: int) -> Any:
        self.count += 1
        if self.count > MAX_NODES:
            raise self.fail(node, f"document expands to more than {MAX_NODES} nodes (alias bomb?); refused")
        if depth > MAX_DEPTH:
            raise self.fail(node, f"document nested deeper than {MAX_DEPTH} levels; refused")
        self.values.setdefault(at, _loc(self.path, node))
        if isinstance(node, MappingNode):
            if node.tag != _MAP_TAG:
                raise self.fail(node, f"unsupported YAML tag {node.tag!r}")
            out: dict[str, Any] = {}
            for key_node, value_node in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    raise self.fail(key_node, "YAML merge keys ('<<') are not supported; write the fields out")
                if not isinstance(key_node, ScalarNode):
                    raise self.fail(key_node, "mapping keys must be plain scalars")
                key = self.scalar(key_node)
                if not isinstance(key, (str, int)) or isinstance(key, bool):
                    raise self.fail(key_node, f"mapping key {key_node.value!r} must be a string")
                key = str(key)
                if key in out:
                    first = self.keys[(*at, key)]
                    raise self.fail(key_node, f"duplicate key '{key}' (first defined at line {first.line})")
                self.keys[(*at, key)] = _loc(self.path, key_node)
                out[key] = self.convert(value_node, (*at, key), depth + 1)
            return out
        if isinstance(node, SequenceNode):
            if node.tag != _SEQ_TAG:
                raise self.fail(node, f"unsupported YAML tag {node.tag!r}")
            return [self.convert(item, (*at, i), depth + 1) for i, item in enumerate(node.value)]
        return self.scalar(node)

    def scalar(self, node: Node) -> Any:
        if node.tag not in _SAFE_SCALAR_TAGS:
            raise self.fail(node, f"unsupported YAML tag {node.tag!r}; only plain strings, numbers, booleans and null")
        return self.scalars.construct_object(node, deep=True)


# libyaml's parser when PyYAML has it (about 10x faster); its error texts are terser, so a document it
# refuses is parsed again by the pure-Python one for the message users see.
_FAST_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _check_depth(text: str, path: Path, loader: Any = _FAST_LOADER) -> None:
    """Refuse deep nesting before composing: the composer recurses, the event parser does not."""
    depth = 0
    for event in yaml.parse(text, Loader=loader):
        if isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
            depth += 1
            if depth > MAX_DEPTH:
                mark = event.start_mark
                raise UserError.at(path, f"document nested deeper than {MAX_DEPTH} levels; refused",
                                   mark.line + 1, mark.column + 1)
        elif isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
            depth -= 1


def load_text(text: str, path: Path) -> Document:
    if len(text.encode("utf-8", "surrogatepass")) > MAX_BYTES:
        raise UserError.at(path, f"file is larger than {MAX_BYTES} bytes; refused", 1, 1)
    try:
        try:
            _check_depth(text, path)
            nodes = list(yaml.compose_all(text, Loader=_FAST_LOADER))
        except yaml.YAMLError:
            if _FAST_LOADER is yaml.SafeLoader:
                raise
            _check_depth(text, path, yaml.SafeLoader)
            nodes = list(yaml.compose_all(text, Loader=yaml.SafeLoader))
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line, col = (mark.line + 1, mark.column + 1) if mark else (1, 1)
        problem = exc.problem or exc.context or "invalid YAML"
        raise UserError.at(path, f"invalid YAML: {problem}", line, col) from None
    except yaml.YAMLError as exc:
        raise UserError.at(path, f"invalid YAML: {exc}", 1, 1) from None
    except RecursionError:
        raise UserError.at(path, f"document nested deeper than {MAX_DEPTH} levels; refused", 1, 1) from None
    if not nodes or nodes[0] is None:
        raise UserError.at(path, "file is empty; expected a mapping with 'apiVersion'", 1, 1)
    if len(nodes) > 1:
        second = nodes[1]
        raise UserError.at(path, "file holds several YAML documents; expected exactly one", *(
            (second.start_mark.line + 1, second.start_mark.column + 1) if second is not None else (1, 1)))
    converter = _Converter(path)
    try:
        data = converter.convert(nodes[0], (), 0)
    except RecursionError:
        raise UserError.at(path, f"document nested deeper than {MAX_DEPTH} levels; refused", 1, 1) from None
    except yaml.YAMLError as exc:
        raise UserError.at(path, f"invalid YAML value: {exc}", 1, 1) from None
    if not isinstance(data, dict):
        raise UserError.at(path, f"expected a mapping at the top level, got {type(data).__name__}",
                           nodes[0].start_mark.line + 1, nodes[0].start_mark.column + 1)
    return Document(path, data, converter.values, converter.keys, bytes_sha256(text.encode("utf-8", "surrogatepass")))


def load_file(path: Path) -> Document:
    try:
        size = path.stat().st_size
        if size > MAX_BYTES:
            raise UserError.at(path, f"file is {size} bytes, larger than the {MAX_BYTES}-byte limit; refused", 1, 1)
        raw = path.read_bytes()
    except FileNotFoundError:
        raise UserError.at(path, "no such file") from None
    except IsADirectoryError:
        raise UserError.at(path, "is a directory, expected a YAML file") from None
    except OSError as exc:
        raise UserError.at(path, f"cannot read: {exc.strerror}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UserError.at(path, f"not UTF-8 text (byte {exc.start})", 1, 1) from None
    return load_text(text, path)
