"""QNN's PT2E quantizer as deployc uses it: observers adjusted for the HTP's 16-bit activations and
softmax inputs, graph rewrites before annotation, and the partitioner that leaves quantized integer casts
on the CPU (docs/qnn.md)."""

from __future__ import annotations

import functools
from typing import Any, cast

from deployc.targets.backends.qnn.graph_rewrites import (
    batch_norms_as_affine,
    clamps_as_relu_minimum,
    constant_gathers_as_slices,
    shared_heads_as_gqa,
)

# PT2E schemes -> ExecuTorch's QuantDtype. Weights are per channel for convolutions and linears;
# activations use MinMax observers (the default moving average clipped ranges with few samples).
QUANT_DTYPES = {"w8a8": "use_8a8w", "16a8w": "use_16a8w", "16a4w": "use_16a4w"}


# w8a8 on the NPU keeps these kinds of operator's activations at 16 bits, every other at 8 (measured
# per kind of operator with benchmarks/qnn_sensitivity.py; docs/qnn.md "w8a8's 16-bit operators").
W8A8_16BIT_OPS: frozenset[str] = frozenset({"add", "layer_norm"})


# The smallest step a softmax's input is quantized at: the HTP's 16-bit softmax went wrong at smaller steps
# (docs/qnn.md, rewrites). A logit step of 2^-16 moves no softmax output by more than 2^-16 of itself.
SOFTMAX_MIN_SCALE = 2.0**-16


# A 16-bit activation is quantized over this many times its calibrated range (from zero), one of its 16 bits
# spent on inputs beyond the calibration's MinMax ranges, which clipped the tails (docs/qnn.md, rewrites). Not a
# softmax's input, whose range a mask's large negatives set: its step matters more than its ends.
ACTIVATION_HEADROOM_16BIT = 2.0


_SOFTMAX = frozenset({"softmax", "safe_softmax"})  # SDPA decomposes into aten._safe_softmax


def op_kind(node: Any) -> str:
    """An FX node's operator without overload or leading underscore: aten._softmax.default -> softmax."""
    name = getattr(node.target, "__name__", str(node.target))
    return name.split(".")[0].lstrip("_")


def adjusted(base: type) -> type:
    """QnnQuantizer, with every softmax's input (and its producer's output) observed at a step of at least
    SOFTMAX_MIN_SCALE, every other 16-bit activation over ACTIVATION_HEADROOM_16BIT times its calibrated
    range (unless `widen_ranges` is off: a decoder calibrated on text), and graph_rewrites run before
    annotation (docs/qnn.md, rewrites)."""
    import dataclasses

    from torchao.quantization.pt2e.quantizer import QuantizationSpec

    def rebuilt(spec: Any, floor: bool, widen: bool) -> Any:
        if not isinstance(spec, QuantizationSpec):
            return spec
        made = spec.observer_or_fake_quant_ctr  # an observer class, or a partial of one (QNN's eps in it)
        partial = getattr(made, "p", None)
        cls, kwargs = (partial.func, dict(partial.keywords)) if partial is not None else (made, {})
        if floor:
            kwargs["eps"] = max(float(kwargs.get("eps", 0.0)), SOFTMAX_MIN_SCALE)
        elif widen and spec.quant_max is not None and spec.quant_max > 255 and cls in (_minmax(), _concat()):
            cls = headroom_observer(cls)
        return dataclasses.replace(spec, observer_or_fake_quant_ctr=cls.with_args(**kwargs))

    class Quantizer(base):
        rewrite_clamps = False
        widen_ranges = True  # Recipe.widen_ranges
        block_linears = 0  # 16a4w: linears' weights in blocks of this many inputs (0: per channel)

        def transform_for_annotation(self, model: Any) -> Any:
            shared_heads_as_gqa(model)
            batch_norms_as_affine(model)
            constant_gathers_as_slices(model)
            if self.rewrite_clamps:
                clamps_as_relu_minimum(model)
            return super().transform_for_annotation(model)

        def annotate(self, model: Any) -> Any:
            if self.block_linears:  # QnnQuantizer's per-block config goes to the nodes named here
                self.block_size_map = {node.name: (1, self.block_linears) for node in model.graph.nodes
                                       if node.op == "call_function" and op_kind(node) == "linear"
                                       and _inputs(node) % self.block_linears == 0 and not output_layer(node)}
            model = super().annotate(model)
            softmax_inputs = {_shared_root(node.args[0]) for node in model.graph.nodes
                              if node.op == "call_function" and op_kind(node) in _SOFTMAX}
            for node in model.graph.nodes:
                ours = node.meta.get("quantization_annotation")
                if node.op != "call_function" or ours is None:
                    continue
                softmax = op_kind(node) in _SOFTMAX
                ours.input_qspec_map = {k: rebuilt(v, softmax and k is node.args[0], self.widen_ranges)
                                        for k, v in ours.input_qspec_map.items()}
                ours.output_qspec = rebuilt(ours.output_qspec, node in softmax_inputs, self.widen_ranges)
            return model

    return Quantizer


def output_layer(node: Any) -> bool:
    """A linear that makes the graph's output (a decoder's logits): 16a4w keeps it at 8 bits per channel, as
    Qualcomm's 4-bit LLM recipes keep their output layer (a tied one is untied first: tied_tables_untied)."""
    return (node.op == "call_function" and op_kind(node) == "linear"
            and any(user.op == "output" for user in node.users))


def _inputs(linear: Any) -> int:
    """A linear node's input features (its weight's last dim), 0 when unknown."""
    weight = linear.args[1] if len(linear.args) > 1 else None
    value = getattr(weight, "meta", {}).get("val")
    return int(value.shape[-1]) if value is not None and value.dim() == 2 else 0


def _shared_root(node: Any) -> Any:
    """The node whose output observer `node`'s output shares (itself where it has its own): SDPA's softmax
    reads a view that shares its matmul's."""
    from torchao.quantization.pt2e.quantizer import SharedQuantizationSpec

    for _ in range(64):
        annotation = node.meta.get("quantization_annotation")
        spec = getattr(annotation, "output_qspec", None)
        if not isinstance(spec, SharedQuantizationSpec):
            break
        shared = spec.edge_or_node
        node = shared[0] if isinstance(shared, tuple) else shared
    return node


def _minmax() -> type:
    from torchao.quantization.pt2e import MinMaxObserver

    return cast(type, MinMaxObserver)


def _concat() -> type:
    """QNN's concatenation observer: it sets its inputs' observed ranges to its own, so that the HTP's
    Concat takes its inputs as they are, without requantizing them."""
    from executorch.backends.qualcomm.quantizer.observers.concat_observer import ConcatObserver

    return cast(type, ConcatObserver)


@functools.cache
def headroom_observer(base: type) -> type:
    """`base` (MinMax, or QNN's concatenation observer, so a concatenation and its inputs share a scale)
    quantizing over ACTIVATION_HEADROOM_16BIT times what it saw, from zero, within float32's finite range
    (a range doubled to -inf is a scale the HTP refuses; docs/qnn.md, rewrites)."""
    import torch

    finite = torch.finfo(torch.float32)

    class HeadroomObserver(base):
        def calculate_qparams(self) -> Any:
            lo = (self.min_val.clamp(max=0) * ACTIVATION_HEADROOM_16BIT).clamp(min=finite.min)
            hi = (self.max_val.clamp(min=0) * ACTIVATION_HEADROOM_16BIT).clamp(max=finite.max)
            return self._calculate_qparams(lo, hi)

    HeadroomObserver.__name__ = HeadroomObserver.__qualname__ = f"Headroom{base.__name__}"
    return HeadroomObserver


_CASTS = ("aten._to_copy.default", "dim_order_ops._to_dim_order_copy.default")


def quantized_integer_casts(graph: Any) -> set[str]:
    """The nodes of an edge graph that turn integers or bools into a quantized float tensor. Why: the HTP's
    Cast into a quantized tensor loses the value; on the CPU it is exact (docs/qnn.md, rewrites)."""
    from executorch.backends.qualcomm.utils.constants import QCOM_QUANT_ATTRS

    return {node.name for node in graph.nodes
            if node.op == "call_function" and getattr(node.target, "__name__", "") in _CASTS
            and QCOM_QUANT_ATTRS in node.meta
            and isinstance(node.args[0], type(node)) and not node.args[0].meta["val"].dtype.is_floating_point
            and node.meta["val"].dtype.is_floating_point}


def partitioner(base: type, specs: Any) -> Any:
    """ExecuTorch's QnnPartitioner, leaving quantized_integer_casts on the CPU. Their names are known only
    after QNN's edge passes, which run inside to_edge_transform_and_lower, so they are found when the
    partitioner first sees the graph."""

    class Partitioner(base):
        def generate_partitions(self, edge_program: Any) -> Any:
            self.skip_node_id_set |= quantized_integer_casts(edge_program.graph)
            return super().generate_partitions(edge_program)

    return Partitioner(specs)
