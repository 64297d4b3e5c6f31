"""The one-pass XNNPACK partitioner the gguf scheme lowers with: the same delegated operators as ExecuTorch's
group partitioner, each dynamically quantized linear's group whole in one partition, the same outputs."""

from __future__ import annotations

import torch
from torch import nn

from deployc.graph.gguf_blocks import BlockLinear, Blocks, Shared
from deployc.targets.backends.xnnpack_partitions import partitioner


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


def test_one_pass_delegates_what_the_group_partitioner_does() -> None:
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import to_edge_transform_and_lower
    from executorch.runtime import Runtime

    x = torch.randn(1, 5, 64)
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
    outputs = {}
    for name, program in lowered.items():
        method = Runtime.get().load_program(program.to_executorch().buffer).load_method("forward")
        outputs[name] = method.execute([x])[0]
    with torch.no_grad():
        want = _Net().eval()(x)
    assert torch.equal(outputs["one pass"], outputs["group"]) or \
        torch.allclose(outputs["one pass"], outputs["group"], rtol=0, atol=1e-5)
    assert torch.allclose(outputs["one pass"], want, atol=2e-2 * float(want.abs().max()))
