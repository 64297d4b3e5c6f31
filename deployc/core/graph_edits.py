"""Small edits of a torch.fx graph that the graph stage and backends' rewrites share: a parameter a node
reads, a node made like another, a node swapped for what replaces it, a graph tidied after. Takes torch
objects; imports no torch."""

from __future__ import annotations

from typing import Any


def call_like(like: Any, target: Any, *args: Any) -> Any:
    """A call of `target` on `args` at the graph's insertion point, with its value computed from its
    arguments' fake tensors (QNN's passes read shapes and dtypes) and `like`'s module path and stack trace."""
    node = like.graph.call_function(target, args)
    node.meta.update({k: v for k, v in like.meta.items() if k in ("nn_module_stack", "stack_trace")})
    values = [arg.meta.get("val") if hasattr(arg, "meta") else arg for arg in args]
    mode = next((v.fake_mode for v in values if hasattr(v, "fake_mode")), None)
    if mode is not None:
        with mode:
            node.meta["val"] = target(*values)
    return node


def swap(node: Any, *made: Any) -> None:
    """Put the last of `made` (the nodes written for `node`, with its value, module path and stack trace)
    where `node` was read, and drop `node`."""
    for new in made:
        new.meta.update({k: v for k, v in node.meta.items() if k in ("val", "nn_module_stack", "stack_trace")})
    node.replace_all_uses_with(made[-1])
    node.graph.erase_node(node)


def tidied(model: Any, rewritten: int) -> int:
    """`rewritten`, after dropping what the rewrites left unread and recompiling, where there were any."""
    if rewritten:
        model.graph.eliminate_dead_code()
        model.recompile()
    return rewritten


def attribute(model: Any, target: Any) -> Any:
    """A get_attr node's value, by its target (None where the path names nothing)."""
    value: Any = model
    for part in str(target).split("."):
        value = getattr(value, part, None)
    return value


def get_attr_value(model: Any, node: Any) -> Any:
    """The tensor a get_attr node reads, or None where the argument is computed."""
    return attribute(model, node.target) if getattr(node, "op", None) == "get_attr" else None
