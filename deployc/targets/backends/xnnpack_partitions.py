"""XNNPACK partitions for graphs too large for ExecuTorch's group partitioner.

ExecuTorch 1.5.1's XNNPACK partitioner starts from one partition per supported node and then tries to merge
every pair (GroupBasedPartitioner._merge_partitions), each try walking the pair's users and their downstream
closure: cubic in practice. A GGUF decoder in the gguf scheme, whose every operator is delegable
(graph/gguf_blocks.py), has ~10,000 such nodes for SmolLM2-135M: its lowering ran past an hour there.
torch.fx's CapabilityBasedPartitioner (which ExecuTorch's XNNPACK partitioner used before its groups) merges
in one pass over the graph, with the same guarantee of no cycle between partitions. XNNPACK's node groups (a
dynamically quantized linear: its activation's choose_qparams, quantize and dequantize with the linear) must
each end in one partition; every group is checked, and if one is split the group partitioner runs after all.

Used for the gguf scheme only: other programs keep the partitions (and bytes) they always had.
"""

from __future__ import annotations

from typing import Any


def partitioner() -> Any:
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from torch.fx.passes.infra.partitioner import CapabilityBasedPartitioner
    from torch.fx.passes.operator_support import OperatorSupportBase

    class _Matched(OperatorSupportBase):
        def is_node_supported(self, submodules: Any, node: Any) -> bool:
            return bool(node.meta.get("match", False))

    class OnePass(XnnpackPartitioner):
        def generate_partitions(self, ep: Any) -> Any:
            groups = self.get_matched_nodes_from_configs(ep)
            for group in groups:
                for node in group:
                    node.meta["match"] = True
            try:
                partitions = CapabilityBasedPartitioner(ep.graph_module, _Matched(),
                                                        allows_single_node_partition=True).propose_partitions()
            finally:
                for group in groups:
                    for node in group:
                        node.meta.pop("match", None)
            where = {node: p.id for p in partitions for node in p.nodes}
            if all(len({where.get(node) for node in group}) == 1 for group in groups):
                return partitions
            return super().generate_partitions(ep)

    return OnePass()
