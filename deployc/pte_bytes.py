"""Where a .pte's bytes go: quantized weights, float weights, quantization scales, and the rest (the
graph, operator tables, delegate headers, padding), read from the file itself.

Weights outside delegates are the program's constant tensors, classed by dtype; a float constant that a
`quantized_decomposed` kernel takes as its scales or zero points counts as scales. Weights inside an
XNNPACK delegate are its constant data, classed by the XNNPACK dtype of the value that holds them; the
per-channel and per-group scales are its quantization parameters. Other delegates' payloads (QNN
context binaries, Vulkan shaders) are opaque and count as the rest."""

from __future__ import annotations

import json
import re
import struct
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from deployc.schema_base import Frozen

# executorch ScalarType -> bytes per element (the types a constant tensor uses)
_ELEMENT_BYTES = {0: 1, 1: 1, 2: 2, 3: 4, 4: 8, 5: 2, 6: 4, 7: 8, 11: 1, 12: 1, 13: 1, 14: 4, 15: 2, 22: 2}
_FLOATS = {5, 6, 7, 15}  # half, float, double, bfloat16
_XNN_FLOATS = {"xnn_datatype_fp32", "xnn_datatype_fp16", "xnn_datatype_bf16"}


class ByteKinds(Frozen):
    quantized_weights: int
    float_weights: int
    scales: int
    other: int  # graph, operator tables, delegate headers and opaque delegate payloads, padding


def _tensor_bytes(tensor: Any) -> int:
    n = 1
    for s in tensor.sizes:
        n *= int(s)
    return n * _ELEMENT_BYTES.get(int(tensor.scalar_type), 4)


def _constants(program: Any) -> tuple[int, int, int]:
    """(quantized, float, scales) bytes of the constant tensors outside delegates."""
    seen: dict[int, tuple[str, int]] = {}
    for plan in program.execution_plan:
        scale_values: set[int] = set()
        for chain in plan.chains:
            for instruction in chain.instructions:
                call = instruction.instr_args
                if hasattr(call, "op_index") and plan.operators[call.op_index].name.startswith(
                        "quantized_decomposed::"):
                    scale_values.update(call.args[1:3])  # (weight, scales, zero points, ...)
        for i, value in enumerate(plan.values):
            tensor = value.val
            index = getattr(tensor, "data_buffer_idx", 0)
            if not hasattr(tensor, "scalar_type") or index <= 0 or index in seen:
                continue
            kind = ("scales" if i in scale_values else "float" if int(tensor.scalar_type) in _FLOATS
                    else "quantized")
            seen[index] = (kind, _tensor_bytes(tensor))
    totals = {"quantized": 0, "float": 0, "scales": 0}
    for kind, size in seen.values():
        totals[kind] += size
    return totals["quantized"], totals["float"], totals["scales"]


def _xnnpack_graph(blob: bytes) -> dict[str, Any] | None:
    """An XNNPACK delegate payload's graph as JSON (flatc and the schema ship with executorch)."""
    from executorch.backends.xnnpack.serialization import xnnpack_graph_serialize as xs
    from executorch.exir._serialize._flatbuffer import _flatc_decompile

    if blob[4:8] != b"XH00":
        return None
    fb_offset, fb_size = struct.unpack("<II", blob[10:18])
    schema = Path(xs.__file__).with_name("schema.fbs")
    with tempfile.TemporaryDirectory(prefix="deployc-xnn-") as tmp:
        binary = Path(tmp) / "graph.bin"
        binary.write_bytes(blob[fb_offset:fb_offset + fb_size])
        try:
            _flatc_decompile(tmp, str(schema), str(binary), ["--raw-binary"])
        except (subprocess.CalledProcessError, OSError):
            return None
        out = Path(tmp) / "graph.json"
        if not out.is_file():
            return None
        # clamp bounds are written as inf / nan, which are not JSON
        return json.loads(re.sub(r":\s*(-?(?:inf|nan))\b", r': "\1"', out.read_text()))


def _xnnpack_bytes(blob: bytes) -> tuple[int, int, int]:
    """(quantized, float, scales) bytes of one XNNPACK delegate's weights."""
    graph = _xnnpack_graph(blob)
    if graph is None:
        return 0, 0, 0
    sizes = [int(c.get("size", 0)) for c in graph.get("constant_data", [])]
    seen: set[int] = set()
    quantized = floats = scales = 0
    for value in graph.get("xvalues", []):
        body = value.get("xvalue_union") or {}
        tensor = body.get("tensor_value", body)
        index = int(tensor.get("constant_buffer_idx", 0))
        params = body.get("quant_params") or {}
        scale_index = int(params.get("scale_buffer_idx", 0) or 0)
        if scale_index and scale_index not in seen and scale_index < len(sizes):
            seen.add(scale_index)
            scales += sizes[scale_index]
        scales += 4 * len(params.get("scale") or []) if isinstance(params.get("scale"), list) else 0
        if index <= 0 or index in seen or index >= len(sizes):
            continue
        seen.add(index)
        if tensor.get("datatype") in _XNN_FLOATS:
            floats += sizes[index]
        else:
            quantized += sizes[index]
    return quantized, floats, scales


def _delegate_payloads(program: Any, data: bytes) -> list[tuple[str, bytes]]:
    from executorch.exir._serialize._program import _ExtendedHeader

    header = _ExtendedHeader.from_bytes(data[8:])
    base = header.segment_base_offset if header.is_valid() else 0
    out = []
    for plan in program.execution_plan:
        for delegate in plan.delegates:
            ref = delegate.processed
            if int(ref.location) == 1:  # a segment of the file
                segment = program.segments[ref.index]
                out.append((delegate.id, data[base + segment.offset: base + segment.offset + segment.size]))
            else:
                out.append((delegate.id, bytes(program.backend_delegate_data[ref.index].data)))
    return out


def byte_kinds(program: Any, data: bytes) -> ByteKinds:
    """`program`: the deserialized Program of the .pte bytes `data`."""
    quantized, floats, scales = _constants(program)
    for backend, blob in _delegate_payloads(program, data):
        if backend == "XnnpackBackend":
            q, f, s = _xnnpack_bytes(blob)
            quantized, floats, scales = quantized + q, floats + f, scales + s
    return ByteKinds(quantized_weights=quantized, float_weights=floats, scales=scales,
                     other=max(0, len(data) - quantized - floats - scales))
