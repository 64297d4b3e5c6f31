"""XNNPACK: the CPU delegate for Arm and x86. Its programs run on this host."""

from __future__ import annotations

import json
import re
import struct
import subprocess
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from deployc.core.quantization import SCHEMES, Recipe
from deployc.targets.backends.base import (
    BackendBase,
    describe_embedding_weights,
    describe_int8_dynamic_activations,
    int8_dynamic_activations,
)

_XNN_FLOATS = {"xnn_datatype_fp32", "xnn_datatype_fp16", "xnn_datatype_bf16"}
_NORMS = ("aten.layer_norm.default", "aten.native_layer_norm.default", "aten.rms_norm.default")


def _off_the_residual_stream(node: Any) -> bool:
    """Whether static int8 may quantize `node`. A transformer's residual additions (those feeding a norm,
    directly or through an identity) stay float: one int8 scale for the whole residual stream costs a tiny
    ViT 12 dB of SQNR (15 -> 27 dB, measured), and the linears around them are quantized either way. A conv
    net's adds feed no norm. So do the statistics of a norm written out in its operators (RMSNorm, T5's
    norm: `x * rsqrt(mean(x**2) + eps)`): the mean of squares spans orders of magnitude one int8 scale
    cannot hold (Gemma 2's first one alone takes the model to 0.9 dB), and the product with its rsqrt reads
    the residual stream."""
    target = str(node.target)
    if target == "aten.add.Tensor" and _feeds_a_norm(node):
        return False
    return not _norm_statistics(node)


# Identities once the model is exported for inference. ViT's embeddings (patches + positions) reach its first
# norm through a dropout: read through it, they stay float as the other residual additions do (a tiny ViT's
# median SQNR in w8a8 19.6 -> 24.2 dB over 12 inputs, measured).
_IDENTITIES = ("aten.dropout.default", "aten.dropout_.default", "aten.clone.default", "aten.alias.default")
_LAYOUTS = ("aten.permute.default", "aten.view.default", "aten.reshape.default", "aten.flatten.using_ints")


# What a residual stream passes through on its way to a norm, and is still the stream: layout changes, and
# the mean a classifier pools it with. ConvNeXt's residual additions reach their norms that way (the last
# one pooled, then normed; the others permuted to channels-last): a tiny ConvNeXt V2's worst of three
# inputs 16.6 -> 28.3 dB with them float, measured.
_TO_A_NORM = (*_IDENTITIES, *_LAYOUTS, "aten.transpose.int", "aten.mean.dim")


def _feeds_a_norm(node: Any) -> bool:
    return any(str(user.target) in _NORMS or (str(user.target) in _TO_A_NORM and _feeds_a_norm(user))
               for user in node.users)


def _squares(node: Any) -> bool:
    target = str(getattr(node, "target", ""))
    if target.startswith("aten.pow."):
        return len(node.args) > 1 and node.args[1] == 2
    return target == "aten.mul.Tensor" and len(node.args) == 2 and node.args[0] is node.args[1]


def _norm_statistics(node: Any) -> bool:
    """A node of a written-out norm's statistics: the mean of squares, its epsilon, the product with the
    reciprocal root."""
    target = str(node.target)
    args = [a for a in node.args if hasattr(a, "target")]
    if target.startswith("aten.mean."):
        return any(_squares(a) for a in args)
    if target == "aten.add.Tensor":
        return any(str(a.target).startswith("aten.mean.") and _norm_statistics(a) for a in args)
    if target == "aten.mul.Tensor":
        return any(str(a.target) == "aten.rsqrt.default" for a in args)
    return False


_PADS = ("aten.pad.default", "aten.constant_pad_nd.default")


def _padding_value(node: Any) -> float | None:
    """A constant pad's fill value (None for a reflect or replicate pad)."""
    if str(node.target) == "aten.constant_pad_nd.default":
        return float(node.args[2]) if len(node.args) > 2 else 0.0
    mode = node.args[2] if len(node.args) > 2 else node.kwargs.get("mode", "constant")
    if mode != "constant":
        return None
    value = node.args[3] if len(node.args) > 3 else node.kwargs.get("value")
    return 0.0 if value is None else float(value)


def _share_through_zero_pads(model: Any) -> None:
    """A zero pad of a quantized tensor keeps its input's scale, and so do the pools and views after it.
    XNNPACK's quantizer shares scales through pools and views but not pads, so a pad between a quantized
    activation and a max pool (BiT's stem: 'same' padding written as a pad) was left float with an int8
    input, and XNNPACK refused the program at load ("Failed to create StaticConstantPad node"). Zero is
    exact in any int8 scale (it is the zero point); another fill value would be rounded, so such pads stay
    as they are."""
    from executorch.backends.xnnpack.quantizer.xnnpack_quantizer_utils import propagate_annotation
    from torchao.quantization.pt2e.quantizer import QuantizationAnnotation, SharedQuantizationSpec

    changed = False
    for node in model.graph.nodes:
        if node.op != "call_function" or str(node.target) not in _PADS or _padding_value(node) != 0.0:
            continue
        source = node.args[0]
        annotation = source.meta.get("quantization_annotation")
        existing = node.meta.get("quantization_annotation")
        if annotation is None or annotation.output_qspec is None or (existing is not None and existing._annotated):
            continue
        shared = SharedQuantizationSpec(source)
        node.meta["quantization_annotation"] = QuantizationAnnotation(
            input_qspec_map={source: shared}, output_qspec=shared, _annotated=True)
        changed = True
    if changed:
        propagate_annotation(model)  # the pools and views after a pad, which saw it unannotated


_CLAMPS = ("aten.hardtanh.default", "aten.hardtanh_.default", "aten.relu6.default", "aten.relu6_.default")
_CLAMPED = ("aten.conv1d.default", "aten.conv2d.default", "aten.linear.default")


def _observe_after_clamps(model: Any) -> None:
    """A convolution's or linear's clamp (ReLU6, hardtanh) quantized like its ReLU: one int8 range, observed
    after the clamp. XNNPACK's quantizer fuses a conv with a ReLU but not with a hardtanh: it observes the
    conv's output and lets the clamp share that range, so a ReLU6's [0, 6] output was written in the conv's
    [-5.5, 5.2] and lost half of int8's codes at every MobileNet block (MobileNetV2's median SQNR 19.4 ->
    22.8 dB, MobileNetV1's 24.8 -> 25.4 and its worst of 12 inputs 15.5 -> 19.5, measured). XNNPACK's
    lowering fuses the clamp into the layer (FuseActivationPass), so the program is one int8 conv with an
    output clamp either way. Not after an add or mul: MobileNetV3's hard swish (relu6(x + 3)) lost 2 dB
    with it (19.8 -> 17.8 median), measured."""
    from torchao.quantization.pt2e.quantizer import QuantizationAnnotation

    for clamp in model.graph.nodes:
        if clamp.op != "call_function" or str(clamp.target) not in _CLAMPS:
            continue
        layer = clamp.args[0]
        if getattr(layer, "op", None) != "call_function" or str(layer.target) not in _CLAMPED or len(layer.users) != 1:
            continue
        annotation = layer.meta.get("quantization_annotation")
        if annotation is None or annotation.output_qspec is None:
            continue
        clamp.meta["quantization_annotation"] = QuantizationAnnotation(
            input_qspec_map={}, output_qspec=annotation.output_qspec, _annotated=True)
        annotation.output_qspec = None


# What a model output may be read through after its last layer: shapes, not values.
_RESHAPES = (*_IDENTITIES, *_LAYOUTS, "aten.squeeze.dim", "aten.squeeze.dims", "aten.unsqueeze.default")


def _output_only(node: Any) -> list[Any] | None:
    """The reshapes between `node` and the model's outputs where its value is read as an output only, else
    None."""
    path: list[Any] = []
    for user in node.users:
        if user.op == "output":
            continue
        further = _output_only(user) if str(user.target) in _RESHAPES else None
        if further is None:
            return None
        path += [user, *further]
    return path


def _dynamic_output_layers(model: Any) -> None:
    """A linear whose output is a model output (a classifier's logits, a decoder's) quantizes its input with
    a scale taken at run time from that input and writes float, its weights int8 as before: XNNPACK's
    dynamic int8 linear. A static int8 output clips whatever leaves the range its calibration samples saw,
    and nothing after it absorbs the error: a tiny BEiT's logits reached 0.29 on one verification input
    against a calibrated [-0.21, 0.25] (11.6 dB; 38.3 with this rule, built and verified), Swin v2's
    10.9 -> 25.5."""
    from executorch.backends.xnnpack.quantizer.xnnpack_quantizer import get_symmetric_quantization_config
    from torchao.quantization.pt2e.quantizer import QuantizationAnnotation

    dynamic = get_symmetric_quantization_config(is_per_channel=True, is_dynamic=True).input_activation
    for node in model.graph.nodes:
        if node.op != "call_function" or str(node.target) != "aten.linear.default":
            continue
        annotation = node.meta.get("quantization_annotation")
        path = _output_only(node)
        if annotation is None or annotation.output_qspec is None or path is None:
            continue
        source, weight = node.args[0], node.args[1]
        node.meta["quantization_annotation"] = QuantizationAnnotation(
            input_qspec_map={source: dynamic, weight: annotation.input_qspec_map[weight]}, _annotated=True)
        for reshape in path:  # they shared the linear's output range
            reshape.meta.pop("quantization_annotation", None)


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


def _weight_bytes(blob: bytes) -> tuple[int, int, int]:
    """(quantized, float, scales) bytes of one XNNPACK delegate's weights: its constant data, classed by
    the XNNPACK dtype of the value that holds them; per-channel and per-group scales are its quantization
    parameters."""
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


@dataclass(frozen=True)
class Xnnpack(BackendBase):
    def executorch_config(self) -> dict[str, Any]:
        # A decoder's KV-cache write (index_put on a mutable buffer) in place: otherwise every call copies
        # each cache whole and copies it back (SmolLM2: 8.1 ms of a 44 ms decode step on portable kernels).
        return {"run_reinplace_pass": True}

    def weight_bytes(self, payload: bytes) -> tuple[int, int, int]:
        return _weight_bytes(payload)

    def describe(self, recipe: Recipe, options: Mapping[str, Any]) -> str:
        if recipe.method == "torchao":
            text = describe_int8_dynamic_activations(SCHEMES[recipe.scheme].weight_bits, recipe.group_size)
            if recipe.embedding_bits:
                text += " + " + describe_embedding_weights(recipe.embedding_bits, recipe.group_size)
            return text
        if recipe.method == "blocks":
            return ("the GGUF file's blocks kept: Q4_0/Q4_1 linears as 4-bit codes with their scales (bf16 in "
                    "XNNPACK) and each block's offset, Q8_0 as two 4-bit halves, the Q8_0 embedding table as bytes; "
                    + ("activations int8 per token, their residual int8 per token again" if recipe.scheme == "gguf"
                       else "activations int8 per token"))
        if recipe.method == "pt2e":
            text = ("PT2E XNNPACKQuantizer(symmetric, per-channel, static; a linear writing an output: dynamic), "
                    "calibrated")
            if recipe.float_fallback:
                text += f"; up to {recipe.float_fallback:.0%} of its operators float where int8 misses the tolerance"
            return text
        return super().describe(recipe, options)

    def quantizer(self, recipe: Recipe, options: Mapping[str, Any]) -> Any:
        if recipe.method == "torchao":
            return int8_dynamic_activations(SCHEMES[recipe.scheme].weight_bits, recipe.group_size)
        from executorch.backends.xnnpack.quantizer.xnnpack_quantizer import (
            XNNPACKQuantizer,
            get_symmetric_quantization_config,
        )

        class Annotations(XNNPACKQuantizer):
            def annotate(self, model: Any) -> Any:
                model = super().annotate(model)
                _observe_after_clamps(model)
                _dynamic_output_layers(model)
                _share_through_zero_pads(model)
                return model

        return (Annotations().set_global(get_symmetric_quantization_config(is_per_channel=True))
                .set_filter_function(_off_the_residual_stream))

    def partitioner_objects(self, recipe: Recipe, options: Mapping[str, Any]) -> list[Any]:
        from executorch.backends.xnnpack.partition.xnnpack_partitioner import (
            XnnpackPartitioner,
        )

        from deployc.targets.backends import xnnpack_partitions, xnnpack_patterns

        xnnpack_patterns.install()
        return [xnnpack_partitions.partitioner() if recipe.method == "blocks" else XnnpackPartitioner()]


BACKEND = Xnnpack(name="xnnpack", methods={"fp32": "none", "8da8w": "torchao", "8da4w": "torchao", "w8a8": "pt2e",
                                           "gguf": "blocks", "gguf-8da": "blocks"},
                  modules=("executorch.backends.xnnpack",), partitioners=("XnnpackPartitioner",),
                  quantized_embeddings=frozenset({"8da8w", "8da4w"}), delegate_id="XnnpackBackend",
                  external_weights=True, arm64_checked=True, float_fallback=True, decomposes_ahead=True,
                  forked_preprocess="XnnpackBackend",
                  helpers=("xnnpack_patterns.py", "xnnpack_partitions.py"))
