"""The one-pass XNNPACK partitioner the gguf scheme lowers with: the same delegated operators as ExecuTorch's
group partitioner, each dynamically quantized linear's group whole in one partition, a cycle never made."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from deployc.graph.gguf_blocks import BlockLinear, Blocks, Shared
from deployc.targets.backends.xnnpack_partitions import partitioner, runs


class _Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(0)

        def blocks(out: int, inp: int) -> BlockLinear:
            codes = torch.randint(0, 16, (out, inp), generator=g).to(torch.int8)
            scale = torch.rand(out, inp // 32, generator=g) * 0.05 + 0.01
            return BlockLinear(Blocks("Q4_1", codes, scale, -8 * scale + 0.01), residual=True)

        self.shared = Shared([blocks(64, 64), blocks(64, 64)])
        self.down = blocks(64, 64)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a, b = self.shared(x)
        return self.down(torch.relu(a) * b)


@pytest.mark.full  # two lowerings (~35 s); make test lowers with it in tests/e2e/test_gguf_models.py
def test_one_pass_delegates_what_the_group_partitioner_does() -> None:
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import to_edge_transform_and_lower

    x = torch.randn(1, 5, 64, generator=torch.Generator().manual_seed(1))
    dims = ({1: torch.export.Dim("t", min=1, max=16)},)
    lowered = {}
    for name, make in (("group", XnnpackPartitioner), ("one pass", partitioner)):
        ep = torch.export.export(_Net().eval(), (x,), dynamic_shapes=dims)
        lowered[name] = to_edge_transform_and_lower(ep, partitioner=[make()])

    def left(program: object) -> list[str]:  # the operators outside every delegate
        graph = program.exported_program().graph_module.graph  # type: ignore[attr-defined]
        return sorted(str(n.target) for n in graph.nodes if n.op == "call_function"
                      and "call_delegate" not in str(n.target) and "getitem" not in str(n.target))

    assert left(lowered["one pass"]) == left(lowered["group"])

    def delegates(program: object) -> int:
        graph = program.exported_program().graph_module.graph  # type: ignore[attr-defined]
        return sum("call_delegate" in str(n.target) for n in graph.nodes)

    assert delegates(lowered["one pass"]) == delegates(lowered["group"]) == 1
    # Its outputs: the gguf scheme's build verifies them (tests/e2e/test_gguf_models.py).


def test_a_node_fed_through_a_portable_operator_opens_the_next_partition() -> None:
    """a -> b (portable) -> c with a and c delegable: one partition {a, c} would feed b and take its output
    back. A portable operator on constants alone (d) does not close the partition."""
    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    a = graph.call_function(torch.relu, (x,))
    d = graph.call_function(torch.neg, (x,))
    e = graph.call_function(torch.add, (a, d))
    b = graph.call_function(torch.sin, (e,))
    c = graph.call_function(torch.add, (b, e))
    graph.output(c)
    assert runs(list(graph.nodes), {a, e, c}) == [[a, e], [c]]
    assert runs(list(graph.nodes), {a, e}) == [[a, e]]
