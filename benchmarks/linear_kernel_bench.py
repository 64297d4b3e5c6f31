"""SmolLM2-135M's linears as each form computes them, lowered to XNNPACK alone and timed through ExecuTorch's
Python runtime on a one-token call: what the `gguf` scheme's faithfulness costs in the linears, apart from
the rest of a decode step. Host figures (x86, this machine's cores), not a device's.

    .venv/bin/python benchmarks/linear_kernel_bench.py [--calls 400] [--rounds 3] [--layers 30]

Forms:
- `4-bit`: XNNPACK's blockwise 4-bit linear (int8 activations per token, a scale per 32 weights): what
  ExecuTorch's export_llm runs per linear (8da4w, group 32);
- `4-bit, 2 rows`: the same linear given two rows: the kernel's cost of the `gguf` scheme's residual row
  alone;
- `gguf-8da`: the file's Q4_1 blocks kept (graph/gguf_blocks.py without the residual): the 4-bit linear
  plus the blocks' offsets (a float linear over the input's block means);
- `gguf`: the same with the input's int8 residual as a second row (the scheme rag_offline ships): its int8
  image computed in the graph, the two rows' sum, the offsets.
The output layer is a Q8_0 table in the `gguf` forms (two 4-bit halves), 4-bit in the `4-bit` forms, as
export_llm has it. Two measurements per form:
- each linear alone, a program of one XNNPACK delegate with the decoder's dynamic length (1..512), called
  with one token: its weights stay in this host's cache (32 MB), so this is the kernels' arithmetic;
- a decode step's linears in one program (`--layers` layers of SmolLM2's four stacked linears, each its own
  weights, and the output layer; one token, a static shape): ~60-110 MB of weights, read from memory every
  call as a decode step reads them.
A call's fixed cost (the runtime's method call and the delegate's, measured on a program that adds 1 to its
input) is printed apart and not subtracted. Forms take turns within each round; the median over rounds of
each round's median.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import zlib
from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from deployc.graph import gguf_blocks  # noqa: E402

# SmolLM2-135M: hidden 576, intermediate 1536, 9 q heads and 3 kv heads of 64, vocabulary 49,152; the
# linears of one input stacked as the gguf scheme stacks them (q, k, v: 960 outputs; gate, up: 3,072).
SHAPES = {"qkv": (576, 960), "o": (576, 576), "gate_up": (576, 3072), "down": (1536, 576),
          "output": (576, 49152)}
PER_STEP = {"qkv": 30, "o": 30, "gate_up": 30, "down": 30, "output": 1}
FORMS = ("4-bit", "4-bit, 2 rows", "gguf-8da", "gguf")


class AddOne(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + 1.0


class TwoRows(nn.Module):
    """The linear given [x; x]: two rows through one call, as the gguf scheme's residual row goes."""

    def __init__(self, linear: nn.Module) -> None:
        super().__init__()
        self.linear = linear

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(torch.cat([x, x]))


def weights(seed: str, inp: int, out: int) -> torch.Tensor:
    generator = torch.Generator().manual_seed(zlib.crc32(seed.encode()))
    return torch.randn(out, inp, generator=generator) * inp ** -0.5


def module(form: str, name: str, seed: str | None = None) -> nn.Module:
    inp, out = SHAPES[name]
    w = weights(seed or name, inp, out)
    if form.startswith("4-bit"):
        grid = gguf_blocks.q8_0(w)  # a symmetric 4-bit grid from it: codes -8..7, a scale a block
        codes = torch.clamp(torch.round(grid.codes.float() / 16), -8, 7).to(torch.int8)
        linear = gguf_blocks._four_bit(codes, grid.scale * 16)
        return TwoRows(linear) if form == "4-bit, 2 rows" else linear
    blocks = gguf_blocks.q8_0(w) if name == "output" else gguf_blocks.q4_1(w)
    return gguf_blocks.BlockLinear(blocks, residual=form == "gguf")


class Stack(nn.Module):
    """A decode step's linears in one program: `layers` layers of q/k/v, o, gate/up and down (each its own
    weights) and the output layer, every one on the call's token (down on a second input of its width), their
    outputs returned: nothing between them, so one delegate holds them all."""

    def __init__(self, form: str, layers: int) -> None:
        super().__init__()
        self.layers = nn.ModuleList(
            nn.ModuleDict({name: module(form, name, f"{name}{i}") for name in SHAPES if name != "output"})
            for i in range(layers))
        self.output = module(form, "output", "output")

    def forward(self, x: torch.Tensor, wide: torch.Tensor) -> tuple[torch.Tensor, ...]:
        outputs = []
        for layer in self.layers:
            assert isinstance(layer, nn.ModuleDict)
            outputs += [layer["qkv"](x), layer["o"](x), layer["gate_up"](x), layer["down"](wide)]
        return (*outputs, self.output(x))


def lower(model: nn.Module, *widths: int, dynamic: bool = True) -> bytes:
    from executorch.exir import to_edge_transform_and_lower

    from deployc.targets.backends import xnnpack_partitions

    seq = torch.export.Dim("seq", min=1, max=512)
    example = tuple(torch.randn(1, 8 if dynamic else 1, width) for width in widths)
    program = torch.export.export(model.eval(), example,
                                  dynamic_shapes=tuple({1: seq} for _ in widths) if dynamic else None)
    edge = to_edge_transform_and_lower(program, partitioner=[xnnpack_partitions.partitioner()])
    delegates = sum(1 for n in edge.exported_program().graph.nodes
                    if n.op == "call_function" and "executorch_call_delegate" in str(n.target))
    if delegates != 1:
        raise SystemExit(f"{type(model).__name__}: {delegates} delegates, not one: not the kernels' figure")
    return bytes(edge.to_executorch().buffer)


def timer(program: bytes, *widths: int) -> Callable[[int], float]:
    from executorch.runtime import Runtime

    method = Runtime.get().load_program(program).load_method("forward")
    inputs = [torch.randn(1, 1, width) for width in widths]

    def run(calls: int) -> float:
        for _ in range(5):
            method.execute(inputs)
        times = []
        for _ in range(calls):
            start = time.perf_counter()
            method.execute(inputs)
            times.append(time.perf_counter() - start)
        return statistics.median(times)

    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=400)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--layers", type=int, default=30)
    args = parser.parse_args()
    from executorch.extension.pybindings import portable_lib

    programs = {(form, name): lower(module(form, name), SHAPES[name][0]) for form in FORMS for name in SHAPES}
    empty = lower(AddOne(), 576)
    for form in FORMS:
        start = time.perf_counter()
        programs[(form, "step")] = lower(Stack(form, args.layers), 576, 1536, dynamic=False)
        print(f"{form}: {args.layers} layers' linears and the output layer lowered in "
              f"{time.perf_counter() - start:.0f} s, {len(programs[(form, 'step')]) / 1e6:.1f} MB", flush=True)
    for threads in (1, 2):
        portable_lib._unsafe_reset_threadpool(threads)
        timers = {key: timer(blob, *((576, 1536) if key[1] == "step" else SHAPES[key[1]][:1]))
                  for key, blob in programs.items()}
        fixed = timer(empty, 576)
        results: dict[tuple[str, str], list[float]] = {key: [] for key in timers}
        fixed_runs = []
        for _ in range(args.rounds):
            fixed_runs.append(fixed(args.calls))
            for key, run in timers.items():
                results[key].append(run(args.calls if key[1] != "step" else max(args.calls // 10, 5)))
        us = {key: statistics.median(v) * 1e6 for key, v in results.items()}
        print(f"\n{threads} thread(s); a call's fixed cost (add 1): {statistics.median(fixed_runs) * 1e6:.1f} us")
        print("| linear (in -> out), one token | " + " | ".join(FORMS) + " |")
        print("|---|" + "---|" * len(FORMS))
        for name, (inp, out) in SHAPES.items():
            print(f"| {name} ({inp} -> {out}), alone, weights in cache | "
                  + " | ".join(f"{us[(f, name)]:.1f} us" for f in FORMS) + " |")
        alone = {f: sum(us[(f, n)] * PER_STEP[n] for n in SHAPES) / 1000 for f in FORMS}
        print("| their sum over a decode step (30 layers and the output layer) | "
              + " | ".join(f"{alone[f]:.2f} ms" for f in FORMS) + " |")
        print(f"| a decode step's linears in one program ({args.layers} layers and the output layer), "
              "weights from memory | " + " | ".join(f"{us[(f, 'step')] / 1000:.2f} ms" for f in FORMS) + " |")
        print("against 4-bit (alone, in cache / one program, from memory): " + ", ".join(
            f"{f} {alone[f] / alone['4-bit']:.2f}x / {us[(f, 'step')] / us[('4-bit', 'step')]:.2f}x"
            for f in FORMS[1:]))


if __name__ == "__main__":
    main()
