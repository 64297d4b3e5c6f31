"""XNNPACK partitions for graphs too large for ExecuTorch's group partitioner.

ExecuTorch 1.5.1's XNNPACK partitioner starts from one partition per supported node and tries to merge every
pair (GroupBasedPartitioner._merge_partitions), each try walking the pair's users against a table of every
node's downstream nodes: quadratic in memory and worse in time. A GGUF decoder in the gguf scheme, whose
operators are nearly all delegable (graph/gguf_blocks.py), has ~12,000 nodes for SmolLM2-135M; its lowering
ran past an hour in that partitioner (torch.fx's capability partitioner builds the same table: 2.8 GB and
growing after 10 minutes).

Here partitions are made in one pass over the graph's order, which is topological (`runs` says how and why
no partition can feed another that feeds it back: what the other partitioners check pair by pair), linear in
the graph. XNNPACK's
node groups (a dynamically quantized linear: its activation's choose_qparams, quantize and dequantize with the
linear) must each lie in one partition; every group is checked, and if one is split ExecuTorch's partitioner
runs after all. A decoder is nearly a chain, so partitions end where its few portable operators are (the
KV-cache writes, the mask, RMSNorm's mean), as maximal partitions would.

Used for the gguf scheme only: other programs keep the partitions (and bytes) they always had.
"""

from __future__ import annotations

import operator
from typing import Any


def runs(nodes: list[Any], supported: set[Any]) -> list[list[Any]]:
    """Partitions of the `supported` call_function nodes in one pass over `nodes` (in topological order). A
    node joins the open partition unless one of its inputs depends on the partition through a node outside
    it (joining would make a cycle); then the partition closes and the node opens the next. A node outside
    that does not depend on the partition (a constant's conversion, say) does not close it. Every node of a
    partition precedes every node of the next, so no partition can feed an earlier one: no cycles between
    them either. A getitem goes with its producer."""
    out: list[list[Any]] = []
    current: list[Any] = []
    inside: set[Any] = set()
    after: set[Any] = set()  # nodes outside the open partition that depend on it
    for node in nodes:
        if node.op != "call_function":
            continue
        inputs = node.all_input_nodes
        if node in supported or (node.target is operator.getitem and inputs and inputs[0] in inside):
            if any(i in after for i in inputs):
                out.append(current)
                current, inside, after = [], set(), set()
            current.append(node)
            inside.add(node)
        elif any(i in inside or i in after for i in inputs):
            after.add(node)
    if current:
        out.append(current)
    return out


def partitioner() -> Any:
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from torch.fx.passes.infra.partitioner import Partition

    class Runs(XnnpackPartitioner):
        def generate_partitions(self, ep: Any) -> Any:
            groups = self.get_matched_nodes_from_configs(ep)
            supported = {node for group in groups for node in group if node.op == "call_function"}
            found = runs(list(ep.graph_module.graph.nodes), supported)
            where = {node: i for i, run in enumerate(found) for node in run}
            for group in groups:
                at = {where.get(n, -1) for n in group if n.op == "call_function"}
                if len(at) != 1 or -1 in at:
                    return super().generate_partitions(ep)
                index = at.pop()
                # The group's weights and constants (placeholders) go with it, as ExecuTorch's partitioner puts them.
                found[index] += [n for n in group if n.op != "call_function" and n not in where]
                where.update({n: index for n in group})
            return [Partition(id=i, nodes=run) for i, run in enumerate(found)
                    if any(n.target is not operator.getitem for n in run)]

    return Runs()
