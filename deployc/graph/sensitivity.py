"""Which operators' static int8 costs a calibrated model its tolerance, and the fewest of them to leave in
floating point so that it meets it (a static scheme's float fallback: docs/manifest.md, "Static int8's
float fallback").

Measured on the prepared (observed, calibrated) model itself: each observer is swapped for a switch that
fake-quantizes with the observer's own parameters or passes its input through, so one forward pass gives
the simulated int8 model with any set of operators left float, without calibrating again. The values to
be int8 are ranked by the error each one alone brings in; the first prefix of that ranking that meets the
target is kept. Errors spread over many layers (a conv net's convolutions) need a long prefix; the budget
caps it.

The ranking runs the model once per observer and sample. With one observer on, everything upstream of it is
the float model's own value, so each of those runs recomputes only the operators downstream of its observer,
from the float run's values: the same operations on the same inputs, so the same bits (CvT: 274 observers x 16
samples, 133.8 s -> 35.6 s, all 274 figures equal)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.utils._pytree as pytree

from deployc.graph.metrics import compare

# How far above the verification tolerance the simulated model must reach on the held-out inputs: the
# verification's own inputs are other draws, and a tiny model's SQNR moves by several dB from one input to
# the next. (The lowered XNNPACK program matches the simulation: to 1e-4 dB on the architectures measured.)
MARGIN_DB = 3.0


@dataclass(frozen=True)
class Target:
    min_cosine: float
    min_sqnr_db: float
    budget: float  # the largest share of quantized operators that may be left float


@dataclass
class Choice:
    """What the search measured and kept."""

    quantized: int  # operators that take int8 inputs
    int8_sqnr_db: float  # the simulated all-int8 model, worst over the samples and outputs
    kept_sqnr_db: float  # with `left_float` float
    left_float: list[str] = field(default_factory=list)  # operators (graph node names) in graph order
    observers: set[str] = field(default_factory=set)  # what apply() switches off to leave them float


class _Switch(torch.nn.Module):
    """An observer's stand-in: fake-quantizes with its parameters when on, passes its input when off."""

    def __init__(self, observer: Any) -> None:
        super().__init__()
        self.on = True
        self.low, self.high = int(observer.quant_min), int(observer.quant_max)
        self.dynamic = bool(getattr(observer, "is_dynamic", False))
        if self.dynamic:  # no range to calibrate: each input's own, as the program takes it at run time
            self.eps, self.axis = float(observer.eps), None
            return
        scale, zero_point = observer.calculate_qparams()
        self.scale, self.zero_point = scale.float(), zero_point.int()
        per_channel = observer.qscheme in (torch.per_channel_symmetric, torch.per_channel_affine)
        self.axis = int(observer.ch_axis) if per_channel else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.on or not x.dtype.is_floating_point:
            return x
        if self.dynamic:
            scale, zero_point = torch.ops.quantized_decomposed.choose_qparams.tensor(
                x, self.low, self.high, self.eps, torch.int8)
            return torch.fake_quantize_per_tensor_affine(x, float(scale), int(zero_point), self.low, self.high)
        if self.axis is not None:
            return torch.fake_quantize_per_channel_affine(x, self.scale, self.zero_point, self.axis, self.low,
                                                          self.high)
        return torch.fake_quantize_per_tensor_affine(x, float(self.scale), int(self.zero_point), self.low, self.high)


def _is_observer(module: Any) -> bool:
    return hasattr(module, "calculate_qparams") and hasattr(module, "quant_min")


@contextmanager
def _switched(prepared: torch.fx.GraphModule) -> Iterator[dict[str, _Switch]]:
    """The prepared model with its observers swapped for switches (all on), put back afterwards."""
    saved = {n.target: prepared.get_submodule(str(n.target)) for n in prepared.graph.nodes
             if n.op == "call_module" and _is_observer(prepared.get_submodule(str(n.target)))}
    switches = {str(name): _Switch(observer) for name, observer in saved.items()}
    for name, switch in switches.items():
        setattr(prepared, name, switch)
    try:
        yield switches
    finally:
        for name, observer in saved.items():
            setattr(prepared, str(name), observer)


def _flat(value: Any) -> list[torch.Tensor]:
    return [t for t in pytree.tree_leaves(value) if isinstance(t, torch.Tensor)]


def _worst(prepared: torch.fx.GraphModule, samples: list[list[torch.Tensor]],
           references: list[list[torch.Tensor]]) -> tuple[float, float]:
    """(worst cosine, worst SQNR dB) of the model's floating-point outputs over the samples."""
    cosine, sqnr = 1.0, 300.0
    with torch.no_grad():
        for sample, reference in zip(samples, references):
            c, s = _worst_of(reference, _flat(prepared(*sample)))
            cosine, sqnr = min(cosine, c), min(sqnr, s)
    return cosine, sqnr


def _worst_of(reference: list[torch.Tensor], outputs: list[torch.Tensor]) -> tuple[float, float]:
    cosine, sqnr = 1.0, 300.0
    for ref, out in zip(reference, outputs):
        if ref.dtype.is_floating_point:
            m = compare(ref.numpy(), out.detach().numpy())
            cosine, sqnr = min(cosine, m.cosine), min(sqnr, m.sqnr_db)
    return cosine, sqnr


# Above this, one sample's recorded float values (every operator's output) would cost more memory than the
# downstream-only runs save in time: the ranking runs the whole model instead (the same figures).
RECORD_LIMIT_BYTES = 2 << 30


def _solo_sqnr(prepared: torch.fx.GraphModule, switches: dict[str, _Switch], samples: list[list[torch.Tensor]],
               references: list[list[torch.Tensor]]) -> dict[str, float]:
    """Each observer's worst SQNR (dB) over the samples when it alone quantizes."""
    if _recorded_bytes(prepared) > RECORD_LIMIT_BYTES:
        return _solo_sqnr_whole(prepared, switches, samples, references)
    worst = dict.fromkeys(switches, 300.0)
    downstream = {name: _downstream(prepared, name) for name in switches}
    for sample, reference in zip(samples, references):
        for s in switches.values():
            s.on = False
        recorder = torch.fx.Interpreter(prepared, garbage_collect_values=False)
        with torch.no_grad():
            recorder.run(*sample)
        for name, (module, upstream) in downstream.items():
            for other, s in switches.items():
                s.on = other == name
            with torch.no_grad():
                outputs = _flat(module(*[recorder.env[n] for n in upstream]))
            worst[name] = min(worst[name], _worst_of(reference, outputs)[1])
    return worst


def _solo_sqnr_whole(prepared: torch.fx.GraphModule, switches: dict[str, _Switch],
                     samples: list[list[torch.Tensor]], references: list[list[torch.Tensor]]) -> dict[str, float]:
    """The same figures, the whole model run once per observer and sample."""
    worst = {}
    for name in switches:
        for other, s in switches.items():
            s.on = other == name
        worst[name] = _worst(prepared, samples, references)[1]
    return worst


def _downstream(prepared: torch.fx.GraphModule, name: str) -> tuple[torch.fx.GraphModule, list[torch.fx.Node]]:
    """The operators that read the named observer's output, directly or not, as a module of their own: it
    takes the upstream values they read (listed) and returns the model's outputs."""
    nodes = list(prepared.graph.nodes)
    start = next(i for i, n in enumerate(nodes) if n.op == "call_module" and str(n.target) == name)
    cone = [nodes[start]]
    inside = set(cone)
    for node in nodes[start + 1:]:
        if node.op != "output" and any(a in inside for a in node.all_input_nodes):
            cone.append(node)
            inside.add(node)
    returned = pytree.tree_leaves(nodes[-1].args[0])
    read = [a for n in cone for a in n.all_input_nodes] + [a for a in returned if isinstance(a, torch.fx.Node)]
    upstream = list(dict.fromkeys(a for a in read if a not in inside))
    graph = torch.fx.Graph()
    copied = {n: graph.placeholder(f"upstream_{i}") for i, n in enumerate(upstream)}
    for node in cone:
        copied[node] = graph.node_copy(node, lambda a: copied[a])
    graph.output([copied[a] if isinstance(a, torch.fx.Node) else a for a in returned])
    return torch.fx.GraphModule(prepared, graph), upstream


def _recorded_bytes(prepared: torch.fx.GraphModule) -> int:
    """About what one sample's float values take: every operator's output (export's shapes), and as much
    again for the observers between them."""
    total = 0
    for node in prepared.graph.nodes:
        value = node.meta.get("val")
        if node.op == "call_function" and isinstance(value, torch.Tensor):
            total += value.numel() * value.element_size()
    return 2 * total


def _inputs_observed(prepared: torch.fx.GraphModule, switches: dict[str, _Switch]) -> dict[str, list[str]]:
    """Each operator that takes observed (to be int8) inputs: the switches on those inputs, in graph order."""
    out: dict[str, list[str]] = {}
    for node in prepared.graph.nodes:
        if node.op != "call_function":
            continue
        observed = [str(a.target) for a in node.all_input_nodes if a.op == "call_module" and str(a.target) in switches]
        if observed:
            out[node.name] = observed
    return out


_WEIGHTED = ("aten.linear.", "aten.conv", "aten.matmul.", "aten.bmm.", "aten.addmm.", "aten.mm.")


def _closure(prepared: torch.fx.GraphModule, operators: dict[str, list[str]], off: set[str]) -> set[str]:
    """`off`, with what XNNPACK needs beside it around each weighted operator (linear, conv, matmul): its
    input and its weights int8 together or float together (its lowering refuses "Weight and Input should
    both be quantized"), and int8 weights only where its output is quantized too (else the weights'
    dequantize stays outside the delegate, which the runtime cannot run). So a float input, weight or
    output makes its inputs and weights float; its output stays int8 where it can."""
    inputs: dict[str, set[str]] = {}
    for node in prepared.graph.nodes:
        if node.op == "call_function" and node.name in operators and str(node.target).startswith(_WEIGHTED):
            inputs[node.name] = set(operators[node.name])
    implies = {name: set(group) for name, group in inputs.items()}
    for node in prepared.graph.nodes:
        if node.name in inputs:
            implies[node.name] |= _outputs(node, operators)
        elif node.name in operators and _zero_pad(node):
            # XNNPACK quantizes a zero pad of an int8 value itself (InsertPadQDQPass): its output is int8
            # whatever its observer says, so it is float only with its input float.
            inputs[node.name] = set(operators[node.name])
            implies[node.name] = {str(u.target) for u in node.users if u.op == "call_module"}
    off = set(off)
    while True:
        more = {o for name, group in implies.items() if group & off for o in inputs[name]} - off
        if not more:
            return off
        off |= more


def _zero_pad(node: Any) -> bool:
    if str(node.target).startswith("aten.constant_pad_nd."):
        return len(node.args) < 3 or node.args[2] == 0
    if str(node.target).startswith("aten.pad."):
        mode = node.args[2] if len(node.args) > 2 else node.kwargs.get("mode", "constant")
        value = node.args[3] if len(node.args) > 3 else node.kwargs.get("value")
        return mode == "constant" and not value
    return False


def _outputs(node: Any, operators: dict[str, list[str]]) -> set[str]:
    """The observers on an operator's output: after it, or after the operators fused to it that read no
    observed value (conv -> batch norm -> relu: the quantizer observes the relu's output only)."""
    found: set[str] = set()
    walk, seen = [node], {node.name}
    while walk:
        for user in walk.pop().users:
            if user.op == "call_module":
                found.add(str(user.target))
            elif user.op == "call_function" and user.name not in operators and user.name not in seen:
                seen.add(user.name)
                walk.append(user)
    return found


# Prefix lengths of the ranking tried, about 1.4x apart: the simulated error is not monotonic in the
# prefix (roundings cancel), so the first that meets the target is kept, not the shortest by bisection.
def _lengths(limit: int) -> list[int]:
    out, k = [], 1
    while k <= limit:
        out.append(k)
        k = max(k + 1, round(k * 1.4))
    return out


def choose(prepared: torch.fx.GraphModule, samples: list[list[torch.Tensor]], target: Target) -> Choice:
    """The operators of a calibrated, prepared model to leave float; none when its simulated int8 already
    meets the target (then the program is exactly what the scheme alone makes).

    Observers are ranked by the error each one alone brings into the otherwise float model (worst SQNR when
    only it quantizes): where the error is one bad range (CvT's class-token concatenation, 6.6 dB alone)
    that ranking finds it first; where it is spread (a conv net), a longer prefix is needed."""
    with _switched(prepared) as switches:
        def measured(on: set[str]) -> tuple[float, float]:
            for name, s in switches.items():
                s.on = name in on
            return _worst(prepared, samples, references)

        for s in switches.values():
            s.on = False
        with torch.no_grad():
            references = [[t.detach().clone() for t in _flat(prepared(*sample))] for sample in samples]
        operators = _inputs_observed(prepared, switches)
        every = set(switches)
        base_cos, base = measured(every)
        choice = Choice(quantized=len(operators), int8_sqnr_db=base, kept_sqnr_db=base)

        def meets(cosine: float, sqnr: float, margin: float) -> bool:
            return cosine >= target.min_cosine and sqnr >= target.min_sqnr_db + margin

        if meets(base_cos, base, MARGIN_DB):
            return choice
        solo = _solo_sqnr(prepared, switches, samples, references)
        ranked = [name for _, _, name in sorted((solo[name], i, name) for i, name in enumerate(switches))]
        limit = int(target.budget * len(operators))
        passing: tuple[list[str], set[str], float] | None = None
        for k in _lengths(len(ranked)):
            off = _closure(prepared, operators, set(ranked[:k]))
            left = [n for n in operators if set(operators[n]) & off]
            if len(left) > limit:
                break
            cosine, sqnr = measured(every - off)
            if meets(cosine, sqnr, 0.0) and passing is None:
                passing = left, off, sqnr  # meets the tolerance itself: kept if the margin is out of reach
            if meets(cosine, sqnr, MARGIN_DB):
                passing = left, off, sqnr
                break
        if passing:
            choice.left_float, choice.observers, choice.kept_sqnr_db = passing
        return choice


def apply(prepared: torch.fx.GraphModule, observers: set[str]) -> None:
    """Leave the named observers' values float in the program convert_pt2e makes: it converts observers
    into quantize/dequantize pairs and passes any other module through, which export then inlines."""
    for name in observers:
        setattr(prepared, name, torch.nn.Identity())


def layer_name(node: Any) -> str:
    """An operator named for a reader: its module path and its op (`encoder.layer.0.attention (matmul)`)."""
    stack = node.meta.get("nn_module_stack") or {}
    op = str(node.target).split(".")[-2] if "." in str(node.target) else str(node.target)
    return f"{next(reversed(stack.values()))[0]} ({op})" if stack else f"{node.name} ({op})"
