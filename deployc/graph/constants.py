"""Chains of operators computed from parameters alone, folded into the tensors they amount to, where a
backend needs a static tensor and the model computes one (docs/architecture.md, "graph")."""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

import torch

from deployc.core.graph_edits import attribute

_QUANTIZES = frozenset({"quantized_decomposed.quantize_per_tensor.default",
                        "quantized_decomposed.quantize_per_channel.default"})


def fold_parameter_chains(model: torch.fx.GraphModule) -> int:
    """Replace each tensor the graph computes from parameters and constants alone (slices, concatenations,
    arithmetic, a learned query's projection) by the tensor it amounts to, before quantization sees
    the graph; the value is the one eager computes. Each of these was a failure or a miss in int8:
    nn.MultiheadAttention splits one packed `in_proj_bias` into the q/k/v biases (SigLIP's pooling head);
    WavLM concatenates three biases to pass them packed, and the quantizer, which quantizes a
    concatenation, would make those biases int8. XNNPACK takes a linear only where its bias is a static
    tensor, and a linear left out leaves its int8 weight's dequantize outside the delegate, which the
    runtime cannot run ("Missing out variants: dequantize_per_channel"). Gemma's RMS norms scale by
    `1 + weight`: quantized, that add of a parameter is an activation op, and in w8a8 (adds at 16 bits) the
    HTP refused it ("mismatching datatypes 0x408 != 0x416"), which left Gemma 2 and 3 unlowerable. BiT
    standardises its convolutions' weights in its forward (a batch norm of the weight); folded, they are
    plain convolutions. Nothing grows: a chain whose result is larger than the largest tensor it reads (a
    repeat, an expand, a broadcast) is left alone, and so is anything the graph writes in place or that
    draws random numbers. Returns how many tensors were folded."""
    return _fold(model, _pure)


def _pure(node: Any) -> bool:
    """Whether `node` computes a tensor from its inputs alone: an aten op that writes none of its arguments
    and draws no random numbers (a batch norm that would update running statistics is not)."""
    target = node.target
    if target is operator.getitem:
        return True
    if not isinstance(target, torch._ops.OpOverload) or not node.all_input_nodes or not target._schema.returns:
        return False
    if torch.Tag.nondeterministic_seeded in target.tags:
        return False
    if any(a.alias_info is not None and a.alias_info.is_write for a in target._schema.arguments):
        return False
    if str(target) == "aten.batch_norm.default":
        return not (node.args[5] and (node.args[3] is not None or node.args[4] is not None))
    return True


_CHECK = "aten._assert_tensor_metadata.default"  # export's dtype check of a cast: no read of the value
_CREATES = frozenset({"ones", "zeros", "full", "arange", "scalar_tensor", "linspace", "eye"})
# A created tensor folded is stored in the program; above this many elements (4 MiB in float32: a long
# context's causal mask) it stays a recipe the program computes.
CREATED_MAX_ELEMENTS = 1 << 20


def fold_created_constants(model: torch.fx.GraphModule) -> int:
    """Replace each tensor the graph builds from `ones`, `arange` and the like (and constants) by its value,
    before quantization sees the graph: a mask, an index or a position table computed the same on every
    run. After quantization such a recipe can no longer be folded whole (its float links get quantize and
    dequantize nodes, its created tensors none) and reaches the NPU as index arithmetic and unquantized
    operands: DETR's attention mask, the image's all-ones pixel mask resized to the feature map and
    gathered by `arange` indices, met the HTP's Gather ("Output[0] has incorrect Rank 4"), and a sine
    table's `arange` frequencies met a 16-bit multiply as float32 ("mismatching datatypes 0x416 !=
    0x232"). Folded at the last link that is no larger than the largest tensor the recipe creates or
    reads (DETR's mask at 784 elements; the 784 x 784 attention mask it broadcasts to is left to the
    backend's own fold), and no larger than CREATED_MAX_ELEMENTS. Chains of parameters alone are
    fold_parameter_chains'. Returns how many tensors were folded."""
    return _fold(model, _pure, created=True)


def fold_constant_quantizes(model: torch.fx.GraphModule) -> int:
    """Replace each quantize of a constant by its int8 tensor, as convert_pt2e does for weights. convert_pt2e
    leaves it where the graph writes in place anywhere near the constant (its folder then treats every
    producer as mutable): RT-DETR's scalar constants, whose quantize XNNPACK's channels-last pass cannot take
    ("invalid index of a 0-dim tensor")."""
    return _fold(model, lambda node: str(node.target) in _QUANTIZES)


def _storage(node: Any) -> Any:
    """The node whose tensor `node` is a view of (itself where it is not a view): a view op's, an in-place
    op's or a split's getitem's first argument, followed up."""
    while node.args and isinstance(node.args[0], torch.fx.Node) and _aliases(node.target):
        node = node.args[0]
    return node


def _aliases(target: Any) -> bool:
    if target is operator.getitem:
        return True
    return (isinstance(target, torch._ops.OpOverload) and bool(target._schema.returns)
            and target._schema.returns[0].alias_info is not None)


def _written(graph: torch.fx.Graph) -> set[Any]:
    """The tensors (by the node that made their storage) that some op of the graph writes in place: a
    buffer it updates, a copy into a slice, an `add_`."""
    out = set()
    for node in graph.nodes:
        if not isinstance(node.target, torch._ops.OpOverload):
            continue
        for argument, value in zip(node.target._schema.arguments, node.args):
            if argument.alias_info is not None and argument.alias_info.is_write and isinstance(value, torch.fx.Node):
                out.add(_storage(value))
    return out


def _constant_nodes(graph: torch.fx.Graph, link: Callable[[Any], bool], written: set[Any],
                     created: bool = False) -> set[Any]:
    """The nodes computed by `link` ops from constants alone, none of it written in place (a folded tensor
    would no longer alias what is written); created: a tensor made from nothing (`ones`, `arange`) counts
    as a constant. In one pass over the graph's topological order: a chain thousands of nodes deep
    (IGCV3's) would exceed Python's recursion limit followed node by node."""
    out: set[Any] = set()
    for node in graph.nodes:
        if _storage(node) in written:
            continue
        if (node.op == "get_attr" or (created and _created(node))
                or (node.op == "call_function" and link(node) and all(a in out for a in node.all_input_nodes))):
            out.add(node)
    return out


def _created(node: Any) -> bool:
    """Whether `node` makes a tensor from its arguments' plain values alone (no tensor, no symbolic size)."""
    target = node.target
    return (node.op == "call_function" and not node.all_input_nodes and isinstance(target, torch._ops.OpOverload)
            and target.overloadpacket.__name__ in _CREATES)


def _fold(model: torch.fx.GraphModule, link: Callable[[Any], bool], created: bool = False) -> int:
    """Fold every chain of `link` operators that starts at constants (get_attr) at its last link; created:
    chains that start at `_created` tensors too, folded at their last link that does not grow
    (fold_created_constants)."""
    values: dict[Any, Any] = {}

    def value(node: Any) -> Any:
        if node not in values:
            if node.op == "get_attr":
                values[node] = attribute(model, node.target)
            else:
                args = torch.fx.node.map_arg(node.args, value)
                kwargs = torch.fx.node.map_arg(node.kwargs, value)
                values[node] = node.target(*args, **kwargs)
        return values[node]

    def size(node: Any) -> int:
        made = value(node) if node.op == "get_attr" else node.meta.get("val")
        return made.numel() if isinstance(made, torch.Tensor) else 0

    def recipe(node: Any) -> bool:
        made = node.meta.get("val")
        if node.op != "call_function" or not isinstance(made, torch.Tensor) or node not in computable:
            return False
        largest, creates = _reads(node, size)
        return creates and made.numel() <= min(largest, CREATED_MAX_ELEMENTS)

    written = _written(model.graph)
    # A folded node's users keep their standing: what they read is a constant (get_attr) either way.
    computable = _constant_nodes(model.graph, link, written, created)
    folded = 0
    with torch.no_grad():  # a parameter's slice would otherwise carry autograd history, which export cannot copy
        for node in list(model.graph.nodes):
            if created:
                if not recipe(node) or all(recipe(user) for user in node.users if str(user.target) != _CHECK):
                    continue  # not made from created tensors, or an inner link: the last link is folded
            else:
                if node.op != "call_function" or node not in computable:
                    continue
                if all(user in computable for user in node.users):
                    continue  # an inner link of the chain: its end is folded
            tensor = value(node)
            if not isinstance(tensor, torch.Tensor) or tensor.numel() > _reads(node, size)[0]:
                continue
            name = register(model, tensor)
            with model.graph.inserting_before(node):
                constant = model.graph.get_attr(name)
            constant.meta.update(node.meta)
            node.replace_all_uses_with(constant)
            folded += 1
    if folded:
        drop_unread(model, {str(n.target) for n in values if n.op == "get_attr"})
    return folded


def _reads(node: Any, size: Callable[[Any], int]) -> tuple[int, bool]:
    """The most elements of any constant the chain ending at `node` reads or creates (0 where none), and
    whether it creates any."""
    largest, creates, stack, seen = 0, False, [node], set()
    while stack:
        n = stack.pop()
        if n in seen:
            continue
        seen.add(n)
        if n.op == "get_attr" or _created(n):
            largest = max(largest, size(n))
            creates = creates or n.op != "get_attr"
        stack.extend(n.all_input_nodes)
    return largest, creates


def drop_unread(model: torch.fx.GraphModule, names: set[str]) -> None:
    """Remove dead nodes, then those of the named attributes nothing reads any more: a packed parameter
    read by nothing would stay in the program beside its slices. Export's dtype checks of a `.float()`
    count as no read: they check a tensor the graph no longer uses (a parameter, or a mask's float recipe
    whose cast was folded)."""
    model.graph.eliminate_dead_code()
    for node in list(model.graph.nodes):
        if (str(node.target) == _CHECK and isinstance(node.args[0], torch.fx.Node)
                and len(node.args[0].users) == 1):
            model.graph.erase_node(node)
    model.graph.eliminate_dead_code()
    read = {str(n.target) for n in model.graph.nodes if n.op == "get_attr"}
    for name in names - read:
        owner, _, leaf = name.rpartition(".")
        delattr(model.get_submodule(owner), leaf)
    model.recompile()


def register(model: torch.nn.Module, tensor: torch.Tensor) -> str:
    """Keep `tensor` as a new buffer of `model`, in row-major strides; returns its name, for a get_attr node.
    A folded view can keep a transpose's strides on a size-1 axis, which `.contiguous()` leaves as they are
    (the tensor counts as contiguous); ExecuTorch then derives a permuted dim order from them and XNNPACK
    fails at run time ("Propagating input shapes failed": SigLIP's pooling-head query)."""
    index = 0
    while hasattr(model, f"_deployc_folded_{index}"):
        index += 1
    name = f"_deployc_folded_{index}"
    model.register_buffer(name, tensor.detach().clone(memory_format=torch.contiguous_format))
    return name
