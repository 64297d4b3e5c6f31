"""GGUF files (llama.cpp's format): the header read and checked without trusting it, the tensor table, and
tensors dequantized to float32 exactly as llama.cpp dequantizes them. No torch: validate and plan read the
header; the build reads the tensors.

A file from the internet is untrusted input: every count and length in it is checked against the bytes
that remain before anything is allocated for it, so a file that claims 2**60 tensors or a 1 TB string is
refused in microseconds, not after the machine runs out of memory.
"""

from __future__ import annotations

import mmap
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from deployc.core.errors import DeploycError

if TYPE_CHECKING:  # numpy is the build's: validate and plan read the header with struct alone
    import numpy as np

MAGIC = b"GGUF"
VERSIONS = (2, 3)
DEFAULT_ALIGNMENT = 32
MAX_DIMS = 4
MAX_ARRAY_DEPTH = 2

# The tensor types deployc reads: id -> (name, elements per block, bytes per block).
TENSOR_TYPES: dict[int, tuple[str, int, int]] = {
    0: ("F32", 1, 4), 1: ("F16", 1, 2), 2: ("Q4_0", 32, 18), 3: ("Q4_1", 32, 20), 8: ("Q8_0", 32, 34),
    30: ("BF16", 1, 2),
}
# ggml's other types, named so that a refusal says which one a file uses.
_OTHER_TYPES = {6: "Q5_0", 7: "Q5_1", 9: "Q8_1", 10: "Q2_K", 11: "Q3_K", 12: "Q4_K", 13: "Q5_K", 14: "Q6_K",
                15: "Q8_K", 16: "IQ2_XXS", 17: "IQ2_XS", 18: "IQ3_XXS", 19: "IQ1_S", 20: "IQ4_NL", 21: "IQ3_S",
                22: "IQ2_S", 23: "IQ4_XS", 24: "I8", 25: "I16", 26: "I32", 27: "I64", 28: "F64", 29: "IQ1_M",
                34: "TQ1_0", 35: "TQ2_0", 39: "MXFP4"}

# Metadata value types: id -> (struct format, size) for scalars; 8 is a string, 9 an array.
_SCALARS: dict[int, tuple[str, int]] = {0: ("<B", 1), 1: ("<b", 1), 2: ("<H", 2), 3: ("<h", 2), 4: ("<I", 4),
                                        5: ("<i", 4), 6: ("<f", 4), 7: ("<?", 1), 10: ("<Q", 8), 11: ("<q", 8),
                                        12: ("<d", 8)}
_STRING, _ARRAY = 8, 9
# The fewest bytes a metadata entry and a tensor entry can take: what a count is checked against.
_MIN_KV_BYTES = 8 + 4 + 1
_MIN_TENSOR_BYTES = 8 + 4 + 4 + 8


class GgufProblem(DeploycError):
    """What is wrong with a GGUF file; the caller names the manifest field. Exit 2."""

    exit_code = 2


@dataclass(frozen=True)
class Tensor:
    name: str
    shape: tuple[int, ...]  # numpy order: GGUF lists the fastest dimension first, this lists it last
    type_id: int
    offset: int  # from the start of the file
    nbytes: int

    @property
    def type_name(self) -> str:
        return TENSOR_TYPES[self.type_id][0]

    @property
    def elements(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n


@dataclass(frozen=True)
class GgufFile:
    path: Path
    version: int
    metadata: dict[str, Any]
    tensors: tuple[Tensor, ...]
    size: int

    @property
    def architecture(self) -> str:
        return str(self.metadata.get("general.architecture", ""))

    def tensor(self, name: str) -> Tensor | None:
        return next((t for t in self.tensors if t.name == name), None)

    def get(self, key: str, kind: type | tuple[type, ...], default: Any = None) -> Any:
        """A metadata value of this Python type, the default when absent; a wrong type is a problem."""
        if key not in self.metadata:
            if default is None:
                raise GgufProblem(f"{self.path.name}: metadata {key} is missing")
            return default
        value = self.metadata[key]
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            raise GgufProblem(f"{self.path.name}: metadata {key} is {type(value).__name__}, expected "
                              f"{getattr(kind, '__name__', kind)}")
        return value


class _Cursor:
    """Reads little-endian values from the file's bytes, every length checked against what remains."""

    def __init__(self, data: mmap.mmap | bytes, name: str) -> None:
        self.data, self.pos, self.name = data, 0, name

    def remaining(self) -> int:
        return len(self.data) - self.pos

    def need(self, n: int, what: str) -> None:
        if n < 0 or n > self.remaining():
            raise GgufProblem(f"{self.name}: truncated or damaged: {what} needs {n:,} bytes at offset "
                              f"{self.pos:,}, {self.remaining():,} remain")

    def scalar(self, fmt: str, size: int, what: str) -> Any:
        self.need(size, what)
        (value,) = struct.unpack_from(fmt, self.data, self.pos)
        self.pos += size
        return value

    def u32(self, what: str) -> int:
        return int(self.scalar("<I", 4, what))

    def u64(self, what: str) -> int:
        return int(self.scalar("<Q", 8, what))

    def string(self, what: str) -> str:
        n = self.u64(f"the length of {what}")
        self.need(n, what)
        raw = bytes(self.data[self.pos:self.pos + n])
        self.pos += n
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise GgufProblem(f"{self.name}: {what} is not UTF-8 (byte {exc.start})") from exc

    def value(self, kind: int, what: str, depth: int = 0) -> Any:
        if kind in _SCALARS:
            fmt, size = _SCALARS[kind]
            return self.scalar(fmt, size, what)
        if kind == _STRING:
            return self.string(what)
        if kind == _ARRAY and depth < MAX_ARRAY_DEPTH:
            item = self.u32(f"the element type of {what}")
            count = self.u64(f"the length of {what}")
            smallest = _SCALARS[item][1] if item in _SCALARS else 8 if item in (_STRING, _ARRAY) else 1
            self.need(count * smallest, f"{what} ({count:,} elements)")
            if item in _SCALARS and item != 7:  # numbers: read in one go (49,152 token types)
                fmt, size = _SCALARS[item]
                values = list(struct.unpack_from(f"<{count}{fmt[1:]}", self.data, self.pos))
                self.pos += size * count
                return values
            return [self.value(item, f"{what}[{i}]", depth + 1) for i in range(count)]
        raise GgufProblem(f"{self.name}: {what} has value type {kind}, which GGUF does not define")


def read(path: Path) -> GgufFile:
    """The file's header and tensor table, checked: the magic, the version, every count against the file's
    size, every tensor's type, shape and bytes inside the file."""
    try:
        with path.open("rb") as fh:
            size = path.stat().st_size
            if size < 24:
                head = fh.read(4)
                if head != MAGIC[:len(head)] or not head:
                    raise GgufProblem(f"{path.name}: not a GGUF file (it starts with {head!r}, not b'GGUF')")
                raise GgufProblem(f"{path.name}: truncated or damaged: {size} bytes, less than a GGUF header")
            with mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as data:
                return _parse(path, data, size)
    except OSError as exc:
        raise GgufProblem(f"cannot read {path}: {exc.strerror or exc}") from exc


def _parse(path: Path, data: mmap.mmap, size: int) -> GgufFile:
    c = _Cursor(data, path.name)
    magic = bytes(data[:4])
    if magic != MAGIC:
        raise GgufProblem(f"{path.name}: not a GGUF file (it starts with {magic!r}, not b'GGUF')")
    c.pos = 4
    version = c.u32("the version")
    if version not in VERSIONS:
        raise GgufProblem(f"{path.name}: GGUF version {version}; deployc reads versions "
                          f"{', '.join(map(str, VERSIONS))}")
    n_tensors, n_kv = c.u64("the tensor count"), c.u64("the metadata count")
    if n_kv * _MIN_KV_BYTES + n_tensors * _MIN_TENSOR_BYTES > c.remaining():
        raise GgufProblem(f"{path.name}: truncated or damaged: it claims {n_tensors:,} tensors and {n_kv:,} "
                          f"metadata entries, more than its {size:,} bytes can hold")
    metadata: dict[str, Any] = {}
    for i in range(n_kv):
        key = c.string(f"metadata key {i}")
        metadata[key] = c.value(c.u32(f"the type of {key}"), key)
    infos = list(_tensor_infos(c, n_tensors))
    alignment = metadata.get("general.alignment", DEFAULT_ALIGNMENT)
    if not isinstance(alignment, int) or alignment <= 0 or alignment & (alignment - 1):
        raise GgufProblem(f"{path.name}: general.alignment {alignment!r} is not a power of two")
    start = -(-c.pos // alignment) * alignment
    tensors = tuple(_placed(path.name, info, start, alignment, size) for info in infos)
    return GgufFile(path, version, metadata, tensors, size)


def _tensor_infos(c: _Cursor, count: int) -> Iterator[tuple[str, tuple[int, ...], int, int]]:
    names: set[str] = set()
    for i in range(count):
        name = c.string(f"the name of tensor {i}")
        if name in names:
            raise GgufProblem(f"{c.name}: tensor {name} is listed twice")
        names.add(name)
        n_dims = c.u32(f"the rank of {name}")
        if not 1 <= n_dims <= MAX_DIMS:
            raise GgufProblem(f"{c.name}: tensor {name} has {n_dims} dimensions (1-{MAX_DIMS} allowed)")
        dims = tuple(c.u64(f"dimension {d} of {name}") for d in range(n_dims))
        type_id = c.u32(f"the type of {name}")
        offset = c.u64(f"the offset of {name}")
        yield name, dims, type_id, offset


def _placed(file: str, info: tuple[str, tuple[int, ...], int, int], start: int, alignment: int,
            size: int) -> Tensor:
    name, dims, type_id, offset = info
    if type_id not in TENSOR_TYPES:
        kind = _OTHER_TYPES.get(type_id, f"type {type_id}")
        raise GgufProblem(f"{file}: tensor {name} is {kind}; deployc reads "
                          f"{', '.join(t[0] for t in TENSOR_TYPES.values())} tensors")
    _, block, block_bytes = TENSOR_TYPES[type_id]
    elements = 1
    for d in dims:
        if d < 1 or d > size * 8:  # no tensor holds more elements than its file holds bits
            raise GgufProblem(f"{file}: tensor {name} has dimension {d}, impossible in a {size:,}-byte file")
        elements *= d
    if dims[0] % block:
        raise GgufProblem(f"{file}: tensor {name}'s rows of {dims[0]} are not whole blocks of {block}")
    nbytes = elements // block * block_bytes
    if offset % alignment:
        raise GgufProblem(f"{file}: tensor {name}'s data at offset {offset} is not aligned to {alignment}")
    if start + offset + nbytes > size:
        raise GgufProblem(f"{file}: truncated or damaged: tensor {name} ends at byte {start + offset + nbytes:,}, "
                          f"past the file's {size:,}")
    return Tensor(name, tuple(reversed(dims)), type_id, start + offset, nbytes)


def dequantize(raw: np.ndarray, tensor: Tensor) -> np.ndarray:
    """float32 values of a tensor's bytes, computed as llama.cpp's dequantize_row_* computes them."""
    import numpy as np

    name = tensor.type_name
    if name == "F32":
        out = raw.view("<f4").astype(np.float32)
    elif name == "F16":
        out = raw.view("<f2").astype(np.float32)
    elif name == "BF16":
        out = (raw.view("<u2").astype(np.uint32) << 16).view(np.float32)
    else:
        out = _blocks(raw, name)
    return out.reshape(tensor.shape)


def _blocks(raw: np.ndarray, name: str) -> np.ndarray:
    import numpy as np

    block_bytes = next(t[2] for t in TENSOR_TYPES.values() if t[0] == name)
    b = raw.reshape(-1, block_bytes)
    d = b[:, 0:2].copy().view("<f2").astype(np.float32)
    if name == "Q8_0":
        q = b[:, 2:].copy().view(np.int8).astype(np.float32)
        return (q * d).reshape(-1)
    first = 4 if name == "Q4_1" else 2
    packed = b[:, first:]
    q = np.concatenate([packed & 0x0F, packed >> 4], axis=1).astype(np.float32)  # elements 0-15, then 16-31
    if name == "Q4_0":
        return ((q - 8.0) * d).reshape(-1)
    m = b[:, 2:4].copy().view("<f2").astype(np.float32)
    return (q * d + m).reshape(-1)


def read_tensor(f: GgufFile, tensor: Tensor) -> np.ndarray:
    """One tensor of the file, dequantized to float32."""
    import numpy as np

    with f.path.open("rb") as fh:
        fh.seek(tensor.offset)
        raw = np.frombuffer(fh.read(tensor.nbytes), dtype=np.uint8)
    if raw.size != tensor.nbytes:
        raise GgufProblem(f"{f.path.name}: truncated or damaged: tensor {tensor.name} is cut short")
    return dequantize(raw, tensor)
