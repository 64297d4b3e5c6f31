"""Rewrites of an exported graph that keep its values and give the HTP a form it computes right (the
measurements behind each: docs/qnn.md, "What deployc rewrites for the HTP")."""

from __future__ import annotations

from typing import Any

from deployc.core.graph_edits import call_like, get_attr_value, swap, tidied


def batch_norms_as_affine(model: Any) -> int:
    """Write each inference batch norm left in `model`'s graph (none after a convolution: prepare_pt2e
    folded those) as x * scale + shift with the norm's own per-channel constants; returns how many. Why:
    the HTP's quantized BatchNorm computed a lone norm wrongly (docs/qnn.md, rewrites)."""
    import torch

    graph, rewritten = model.graph, 0
    for node in list(graph.nodes):
        if node.op != "call_function" or str(node.target) != "aten.batch_norm.default" or node.args[5] is not False:
            continue
        gamma, beta, mean, var = (a if a is None else get_attr_value(model, a) for a in node.args[1:5])
        fake = node.meta.get("val")
        if mean is None or var is None or not hasattr(fake, "fake_mode"):
            continue
        with torch.no_grad():
            scale = torch.rsqrt(var + float(node.args[7]))
            scale = scale if gamma is None else scale * gamma
            shift = -mean * scale if beta is None else beta - mean * scale
        x = node.args[0]
        per_channel = (-1,) + (1,) * (fake.dim() - 2)
        with graph.inserting_before(node):
            constants: list[Any] = []
            for tensor in (scale.reshape(per_channel), shift.reshape(per_channel)):
                name = f"_deployc_batch_norm_affine_{rewritten}_{len(constants)}"
                model.register_buffer(name, tensor.detach().clone())
                constant = graph.get_attr(name)
                constant.meta["val"] = fake.fake_mode.from_tensor(getattr(model, name))  # QNN's rules read it
                constants.append(constant)
            scaled = graph.call_function(torch.ops.aten.mul.Tensor, (x, constants[0]))
            shifted = graph.call_function(torch.ops.aten.add.Tensor, (scaled, constants[1]))
        swap(node, scaled, shifted)
        rewritten += 1
    return tidied(model, rewritten)


def constant_gathers_as_slices(model: Any) -> int:
    """Write each gather along one dim at constant consecutive indices (`x[..., [-2], :]`) as the slice it
    is; returns how many. Why: the HTP's quantized Gather of Falcon's fused q/k/v came out unrelated to
    eager (docs/qnn.md, rewrites)."""
    import torch

    graph, rewritten = model.graph, 0
    for node in list(graph.nodes):
        if node.op != "call_function" or str(node.target) != "aten.index.Tensor":
            continue
        source, indices = node.args[0], list(node.args[1])
        given = [d for d, index in enumerate(indices) if index is not None]
        shape = getattr(source.meta.get("val"), "shape", None)
        if len(given) != 1 or shape is None:
            continue
        dim = given[0]
        index = indices[dim]
        constant = get_attr_value(model, index.args[0] if str(index.target) == "aten.lift_fresh_copy.default"
                              else index)
        if constant is None or constant.dim() != 1 or constant.numel() == 0 \
                or constant.dtype not in (torch.int64, torch.int32):
            continue
        size = int(shape[dim])
        at = [int(i) % size if -size <= int(i) < size else -1 for i in constant.tolist()]
        if -1 in at or at != list(range(at[0], at[0] + len(at))):
            continue
        with graph.inserting_before(node):
            sliced = graph.call_function(torch.ops.aten.slice.Tensor, (source, dim, at[0], at[0] + len(at)))
        swap(node, sliced)
        rewritten += 1
    return tidied(model, rewritten)


_CLAMPS = {"aten.relu6.default": (0.0, 6.0), "aten.relu6_.default": (0.0, 6.0), "aten.hardtanh.default": None,
           "aten.hardtanh_.default": None, "aten.clamp.default": None, "aten.clamp_.default": None}


def clamps_as_relu_minimum(model: Any) -> int:
    """Write each clamp from 0 in `model`'s graph (`F.relu6`, `F.hardtanh`, `torch.clamp(x, 0, top)`, in
    place where nothing reads its input after it) as max(x, 0) then the minimum with its top; returns how
    many. Why: the HTP's ReluMinMax loses precision with 16-bit activations (docs/qnn.md, rewrites)."""
    import torch

    graph, rewritten = model.graph, 0
    order = {node: i for i, node in enumerate(graph.nodes)}
    for node in list(graph.nodes):
        target = str(node.target)
        if node.op != "call_function" or target not in _CLAMPS:
            continue
        low, top = _CLAMPS[target] or [node.args[i] if len(node.args) > i else node.kwargs.get(key)
                                       for i, key in ((1, "min"), (2, "max"))]
        x, fake = node.args[0], node.meta.get("val")
        if low != 0 or not isinstance(top, (int, float)) or not hasattr(fake, "fake_mode") \
                or not fake.dtype.is_floating_point \
                or (target.endswith("_.default") and any(order.get(u, -1) > order[node] for u in x.users)):
            continue
        name = f"_deployc_clamp_top_{rewritten}"
        model.register_buffer(name, torch.tensor(float(top), dtype=fake.dtype), persistent=False)
        with graph.inserting_before(node):  # (a rewritten clamp's nodes are not in `order`: they come before)
            ceiling = graph.get_attr(name)
            ceiling.meta["val"] = fake.fake_mode.from_tensor(getattr(model, name))  # QNN's rules read it
            relu = graph.call_function(torch.ops.aten.relu.default, (x,))
            clamped = graph.call_function(torch.ops.aten.minimum.default, (relu, ceiling))
        swap(node, relu, clamped)
        rewritten += 1
    return tidied(model, rewritten)


_SIGMOIDS = ("aten.sigmoid.default", "aten.silu.default")


def sigmoids_as_tanh(module: Any) -> int:
    """Write each sigmoid in `module`'s graph through a tanh: `a * sigmoid(g)` as `a/2 + a/2 * tanh(g/2)`,
    a SiLU `x/2 + x/2 * tanh(x/2)`, any other read `tanh(g/2)/2 + 1/2`; returns how many. Why: the HTP's
    fp16 sigmoid after a convolution or a linear, and its products with one, were off (docs/qnn.md, rewrites)."""
    import torch

    aten = torch.ops.aten
    graph, rewritten = module.graph, 0
    for node in list(graph.nodes):
        fake = node.meta.get("val")
        if node.op != "call_function" or str(node.target) not in _SIGMOIDS or not isinstance(fake, torch.Tensor) \
                or not fake.dtype.is_floating_point:
            continue
        with graph.inserting_before(node):
            tanh = call_like(node, aten.tanh.default, call_like(node, aten.mul.Tensor, node.args[0], 0.5))
        silu = str(node.target) == "aten.silu.default"
        for product, a in [(node, node.args[0])] if silu else _products(node):
            with graph.inserting_before(product):
                half = call_like(product, aten.mul.Tensor, a, 0.5)
                product.replace_all_uses_with(
                    call_like(product, aten.add.Tensor, half, call_like(product, aten.mul.Tensor, half, tanh)))
            graph.erase_node(product)
        if not silu:  # a SiLU was its own product; a sigmoid read otherwise still is a sigmoid there
            if node.users:
                with graph.inserting_before(node):
                    node.replace_all_uses_with(
                        call_like(node, aten.add.Tensor, call_like(node, aten.mul.Tensor, tanh, 0.5), 0.5))
            graph.erase_node(node)
        rewritten += 1
    return tidied(module, rewritten)


def _products(node: Any) -> list[tuple[Any, Any]]:
    """The multiplies that read `node` once, by another computed tensor: (the multiply, that tensor)."""
    out = []
    for user in list(node.users):
        if user.op == "call_function" and str(user.target) == "aten.mul.Tensor" and len(user.args) == 2 \
                and not user.kwargs and sum(arg is node for arg in user.args) == 1:
            other = user.args[1] if user.args[0] is node else user.args[0]
            if getattr(other, "meta", {}).get("val") is not None:  # computed, its value known
                out.append((user, other))
    return out


def fold_constants(program: Any) -> Any:
    """Compute once what does not depend on the inputs (position tables, ALiBi slopes, masks from `arange`
    and `full`, an attention of constants), keeping quantize/dequantize nodes, after in-place operators are
    made functional. Why: a static tensor cannot be a delegate's output (docs/qnn.md, rewrites)."""
    from executorch.exir.operator.util import _QUANT_PRIMITIVES
    from executorch.exir.passes.constant_prop_pass import constant_prop_pass

    program = program.run_decompositions({})
    swapped = _attention_as_pure(program.graph)
    program = constant_prop_pass(program, custom_skip_targets=set(_QUANT_PRIMITIVES))
    for node in program.graph.nodes:
        if node in swapped:
            node.target = swapped[node]
    program.graph_module.recompile()
    return program


def _attention_as_pure(graph: Any) -> dict[Any, Any]:
    """Give each scaled-dot-product attention without dropout a plain-function target that calls it, so
    constant propagation (which skips SDPA for its dropout) evaluates one of constants; returns the nodes
    and their original targets, to put back."""
    import torch

    sdpa = torch.ops.aten.scaled_dot_product_attention.default
    swapped = {}
    for node in graph.nodes:
        if node.op == "call_function" and node.target is sdpa and not _dropout(node):
            node.target = _attention
            swapped[node] = sdpa
    return swapped


def _dropout(node: Any) -> float:
    return float(node.args[4] if len(node.args) > 4 else node.kwargs.get("dropout_p", 0.0))


def _attention(*args: Any, **kwargs: Any) -> Any:
    import torch

    return torch.ops.aten.scaled_dot_product_attention.default(*args, **kwargs)


def shared_heads_as_gqa(module: Any) -> int:
    """Mark each attention whose keys and values have one head for all the query's heads (multi-query:
    Falcon) as grouped-query attention; returns how many. Why: ExecuTorch's SDPA decomposition takes a
    head mismatch only as GQA (docs/qnn.md, rewrites)."""
    import torch

    marked = 0
    for node in module.graph.nodes:
        if node.target is not torch.ops.aten.scaled_dot_product_attention.default or node.kwargs.get("enable_gqa"):
            continue
        query, key, value = (a.meta.get("val") for a in node.args[:3])
        if all(isinstance(t, torch.Tensor) and t.dim() == 4 for t in (query, key, value)) \
                and key.shape[1] == value.shape[1] == 1 < query.shape[1]:
            node.kwargs = {**node.kwargs, "enable_gqa": True}
            marked += 1
    if marked:
        module.recompile()
    return marked
