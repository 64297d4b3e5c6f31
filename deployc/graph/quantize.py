"""Apply a plan's quantization recipe to a model, with the quantizer its backend builds: torchao
configs before export, PT2E (prepare, calibrate, convert) around it."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from deployc.core.digests import file_sha256
from deployc.core.errors import BuildError
from deployc.core.facts import FloatFallback
from deployc.core.graph_edits import attribute
from deployc.core.quantization import Recipe
from deployc.graph import batch_norm, constants, sensitivity
from deployc.graph.inputs import export_point, make_inputs
from deployc.plan.build_plan import CalibrationText, Export


def torchao_quantize(model: torch.nn.Module, config: Any, group_size: int | None,
                     called: dict[int, int] | None = None) -> torch.nn.Module:
    """called: the linears one eager call runs as modules, with their inputs' rank (input_ranks); the others
    stay float: a model that reads a linear's weight as a tensor (WavLM's attention passes it to
    F.multi_head_attention_forward, which transposes it) cannot read a quantized one ("IntxUnpackedToInt8Tensor
    ... aten.t"). Linears written out by hand become plain ones first, those on inputs of rank 4 or more
    RowsLinear."""
    from torchao.quantization import quantize_

    plain_linears(model)
    if called is not None:
        linears_on_rows(model, called)

    def eligible(module: torch.nn.Module, fqn: str) -> bool:
        # Grouped int4 needs in_features divisible by the group; other linears stay float. Attention's
        # out_proj is marked non-quantizable: F.multi_head_attention_forward transposes its raw weight.
        if isinstance(module, torch.nn.modules.linear.NonDynamicallyQuantizableLinear):
            return False
        if called is not None and id(module) not in called:
            return False
        return isinstance(module, torch.nn.Linear) and (group_size is None or module.in_features % group_size == 0)

    quantize_(model, config, filter_fn=eligible)
    return model


# Linear subclasses whose forward is Linear's arithmetic written out, on the raw weight (Falcon's
# `input @ self.weight.T + bias`): a quantized weight has no transpose ("IntxUnpackedToInt8Tensor ...
# aten.permute"), F.linear reads it. Their state is Linear's, so they become plain Linears.
PLAIN_LINEARS = frozenset({"transformers.models.falcon.modeling_falcon.FalconLinear"})


class RowsLinear(torch.nn.Linear):
    """A Linear over its input's rows: the leading dims flattened into one, then restored; the same values.
    XNNPACK lowers a dynamically quantized linear on inputs of rank 2 or 3 only (FocalNet's modulation
    projects (batch, height, width, channels): "Weight and Input should both be quantized"), and 8da8w's
    per-token activation scales are per row either way."""

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        rows = super().forward(input.reshape(-1, input.shape[-1]))
        return rows.reshape(*input.shape[:-1], self.out_features)


def linears_on_rows(model: torch.nn.Module, ranks: dict[int, int]) -> None:
    """Make the plain Linears that `ranks` (input_ranks) saw called on a tensor of rank 4 or more RowsLinear,
    in place."""
    for module in model.modules():
        if type(module) is torch.nn.Linear and ranks.get(id(module), 0) > 3:
            module.__class__ = RowsLinear


def plain_linears(model: torch.nn.Module) -> int:
    """Make the PLAIN_LINEARS in `model` nn.Linear, in place; how many."""
    count = 0
    for module in model.modules():
        kind = type(module)
        if f"{kind.__module__}.{kind.__qualname__}" in PLAIN_LINEARS:
            module.__class__ = torch.nn.Linear
            count += 1
    return count


def looked_up_embeddings(model: torch.nn.Module, example: list[torch.Tensor]) -> set[int]:
    """The embedding modules one eager call on the example calls as lookups (by id). DETR-style models
    read a table as a plain tensor (learned queries: `embedding.weight.unsqueeze(0)`), which a quantized
    table does not support ("IntxUnpackedToInt8Tensor ... aten.unsqueeze"): those stay float."""
    return called_modules(model, example, torch.nn.Embedding)


def called_modules(model: torch.nn.Module, example: list[torch.Tensor], kind: type[torch.nn.Module]) -> set[int]:
    """The modules of `kind` one eager call on the example runs as modules (by id)."""
    return set(input_ranks(model, example, kind))


def input_ranks(model: torch.nn.Module, example: list[torch.Tensor], kind: type[torch.nn.Module]) -> dict[int, int]:
    """The modules of `kind` one eager call on the example runs as modules (by id), each with the highest
    rank of the first tensor it was called with."""
    called: dict[int, int] = {}

    def seen(module: torch.nn.Module, args: tuple[Any, ...]) -> None:
        rank = args[0].dim() if args and isinstance(args[0], torch.Tensor) else 0
        called[id(module)] = max(rank, called.get(id(module), 0))

    hooks = [m.register_forward_pre_hook(seen) for m in model.modules() if isinstance(m, kind)]
    state = [(b, b.clone()) for b in model.buffers()]  # a KV cache is written by the call: put back
    try:
        with torch.no_grad():
            model(*example)
    finally:
        for hook in hooks:
            hook.remove()
        with torch.no_grad():
            for buffer, saved in state:
                buffer.copy_(saved)
    return called


def quantize_embeddings(model: torch.nn.Module, config: Any, group_size: int | None,
                        looked_up: set[int] | None = None) -> list[str]:
    """Quantize the model's embedding tables (weight-only) in place; returns the tables that stayed
    float because their width does not divide into the groups or the model reads them as tensors
    (not in `looked_up`, when given)."""
    from torchao.quantization import quantize_

    skipped: list[str] = []

    def eligible(module: torch.nn.Module, fqn: str) -> bool:
        if not isinstance(module, torch.nn.Embedding):
            return False
        if looked_up is not None and id(module) not in looked_up:
            skipped.append(fqn)
            return False
        if group_size is not None and module.embedding_dim % group_size:
            skipped.append(fqn)
            return False
        # padding_idx changes only gradients, but an embedding call that passes it does not match
        # ExecuTorch's quantized-embedding fusion, which leaves an op the runtime lacks (measured on BERT).
        module.padding_idx = None
        return True

    quantize_(model, config, filter_fn=eligible)
    return skipped


class PairSwappedEmbedding(torch.nn.Module):
    """An embedding that keeps its table with each pair of columns swapped and swaps its output back.

    Why: ExecuTorch's 4-bit embedding kernel packs column 2k into a byte's high nibble and XNNPACK's
    4-bit linear packs it into the low one. A table tied to the output layer therefore quantizes to
    the same int4 values but to other bytes, and is stored twice. With its pairs swapped, the
    embedding's packed table is byte for byte what XNNPACK stores for the output layer, and the
    external data file (which keys tensors by sha256) keeps it once. The output is unchanged."""

    def __init__(self, embedding: torch.nn.Embedding) -> None:
        super().__init__()
        n, d = embedding.weight.shape
        self.table = torch.nn.Embedding(n, d)
        swapped = embedding.weight.detach().reshape(n, d // 2, 2).flip(-1).reshape(n, d)
        self.table.weight = torch.nn.Parameter(swapped.contiguous(), requires_grad=False)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        out = self.table(ids)
        return out.reshape(*out.shape[:-1], out.shape[-1] // 2, 2).flip(-1).reshape(out.shape)


def tied_embeddings(model: torch.nn.Module, group_size: int) -> list[str]:
    """Embedding tables that are also a linear layer's weight (tie_word_embeddings) and quantize in
    groups of `group_size`. Found before the linears are quantized: that gives the linear a weight of
    its own."""
    linear_weights = {id(m.weight) for m in model.modules() if isinstance(m, torch.nn.Linear)}
    return [name for name, m in model.named_modules() if isinstance(m, torch.nn.Embedding)
            and id(m.weight) in linear_weights and m.embedding_dim % group_size == 0 and group_size % 2 == 0]


def share_tied_int4_tables(model: torch.nn.Module, names: list[str]) -> None:
    """Replace each named embedding with its PairSwappedEmbedding (before the embeddings are quantized)."""
    for name in names:
        parent_name, _, attr = name.rpartition(".")
        parent = model.get_submodule(parent_name)
        setattr(parent, attr, PairSwappedEmbedding(getattr(parent, attr)))


# What quantize_per_tensor takes: a float64 value (RT-DETR's anchors) fails at export ("Expecting input to
# have dtype torch.float32").
_QUANTIZABLE = (torch.float32, torch.float16, torch.bfloat16)


def _quantizable(node: Any, model: torch.fx.GraphModule) -> bool:
    """Whether a graph value is a tensor int8 can stand for (unknown values count as one). Lifted
    constants (get_attr) carry no value in their metadata: their tensor is looked up."""
    value = node.meta.get("val") if hasattr(node, "meta") else None
    if value is None and getattr(node, "op", None) == "get_attr":
        value = attribute(model, node.target)
    return not isinstance(value, torch.Tensor) or value.dtype in _QUANTIZABLE


def float_paths_only(quantizer: Any) -> Any:
    """`quantizer`, with its annotations of integer and float64 tensors removed. PT2E quantizers annotate
    every input of the ops they match, and transformers route token, position and index tensors (int64)
    through such ops: observing them fails at calibration ("tensors used as indices must be long ...")
    or quantizes an index. Only float32 (and half) paths are quantized; the others stay as they are."""
    from torchao.quantization.pt2e.quantizer import Quantizer

    class FloatOnly(Quantizer):
        def transform_for_annotation(self, model: torch.fx.GraphModule) -> torch.fx.GraphModule:
            model = quantizer.transform_for_annotation(model)
            _restore_integer_scalars(model)
            return model

        def annotate(self, model: torch.fx.GraphModule) -> torch.fx.GraphModule:
            model = quantizer.annotate(model)
            for node in model.graph.nodes:
                annotation = node.meta.get("quantization_annotation")
                if annotation is None:
                    continue
                annotation.input_qspec_map = {n: spec for n, spec in annotation.input_qspec_map.items()
                                              if _quantizable(n, model)}
                if not _quantizable(node, model):
                    annotation.output_qspec = None
            return model

        def validate(self, model: torch.fx.GraphModule) -> None:
            quantizer.validate(model)

    return FloatOnly()


def _restore_integer_scalars(model: torch.fx.GraphModule) -> None:
    """XNNPACK's quantizer turns the scalar of every add/mul into a float32 tensor constant so that it
    can be observed, integer arithmetic included (position ids: arange + offset), which makes those
    results float and breaks the indexing they feed. Ops that are not quantized (integer, float64) get
    their scalar back."""
    changed = False
    for node in model.graph.nodes:
        if node.op != "call_function" or node.target not in (torch.ops.aten.add.Tensor, torch.ops.aten.mul.Tensor):
            continue
        if _quantizable(node, model):
            continue
        args = []
        for arg in node.args:
            value = getattr(model, str(arg.target), None) if getattr(arg, "op", None) == "get_attr" else None
            if isinstance(value, torch.Tensor) and value.dim() == 0 and value.dtype.is_floating_point:
                number = value.item()
                args.append(int(number) if float(number).is_integer() else number)
                changed = True
            else:
                args.append(arg)
        node.args = tuple(args)
    if changed:
        model.graph.eliminate_dead_code()
        model.recompile()


LAYERS = ("aten.linear.default", "aten.conv1d.default", "aten.conv2d.default", "aten.conv3d.default")
_WEIGHTED = (*LAYERS, "aten.matmul.default", "aten.bmm.default", "aten.addmm.default")


def stayed_float(model: torch.fx.GraphModule, kinds: tuple[str, ...] = _WEIGHTED) -> list[str]:
    """The weighted layers (linear, conv, matmul; or `kinds`) of a quantized model whose input is not
    dequantized from int8: what quantization left in floating point, named by the model's module path."""
    out = []
    for node in model.graph.nodes:
        if node.op != "call_function" or str(node.target) not in kinds:
            continue
        source = node.args[0] if node.args else None
        if "dequantize" not in str(getattr(source, "target", "")):
            stack = node.meta.get("nn_module_stack") or {}
            out.append(next(reversed(stack.values()))[0] if stack else node.name)
    return sorted(set(out))


def pt2e_quantize(ep: torch.export.ExportedProgram, quantizer: Any, calibration: list[list[torch.Tensor]],
                  reexport: Callable[[torch.nn.Module], torch.export.ExportedProgram],
                  fallback: tuple[sensitivity.Target, list[list[torch.Tensor]]] | None = None,
                  ) -> tuple[torch.export.ExportedProgram, list[str], FloatFallback | None]:
    """(the quantized program, the weighted layers that stayed float, what the float fallback measured and
    left float). fallback: its target and the held-out samples it is measured on (not the calibration
    samples: the ranges fit those, so they flatter the int8 model)."""
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    module = ep.module(check_guards=False)
    constants.fold_parameter_chains(module)
    constants.fold_created_constants(module)
    batch_norm.fold_into_linears(module)
    prepared = prepare_pt2e(module, float_paths_only(quantizer))
    for sample in calibration:
        prepared(*sample)
    record = None
    if fallback is not None:
        target, held_out = fallback
        choice = sensitivity.choose(prepared, held_out, target)
        nodes = {n.name: n for n in prepared.graph.nodes}
        record = FloatFallback(budget=target.budget, quantized=choice.quantized,
                               int8_sqnr_db=round(choice.int8_sqnr_db, 2), kept_sqnr_db=round(choice.kept_sqnr_db, 2),
                               left_float=[sensitivity.layer_name(nodes[n]) for n in choice.left_float])
        sensitivity.apply(prepared, choice.observers)
    converted = convert_pt2e(prepared)
    constants.fold_constant_quantizes(converted)
    return reexport(converted), stayed_float(converted), record


def calibration_samples(recipe: Recipe, export: Export, folder: Path, text: CalibrationText | None = None
                        ) -> list[list[torch.Tensor]]:
    """A decoder's calibration text (each sequence's first tokens as a prompt, at the export's length), the
    manifest's dataset (sha256-checked), or seeded random samples within the inputs' ranges."""
    if text is not None:  # the decoder interface: tokens [1, seq], input_pos [seq]
        point = export_point(export.dims)
        out = []
        for ids in text.sequences:
            tokens, positions = make_inputs(export.inputs, {**point, "seq": min(point["seq"], len(ids))}, 0)
            out.append([torch.tensor(ids[:tokens.shape[-1]]).reshape(tokens.shape).to(tokens.dtype), positions])
        return out
    if not recipe.calibration_dataset:
        return [make_inputs(export.inputs, export_point(export.dims), (recipe.calibration_seed or 0) + 1000 + j)
                for j in range(recipe.calibration_samples or 1)]
    path = folder / recipe.calibration_dataset
    if file_sha256(path) != recipe.calibration_dataset_sha256:
        raise BuildError(f"calibration dataset {recipe.calibration_dataset} changed since the plan was made")
    samples = torch.load(path, weights_only=True)
    if not isinstance(samples, (list, tuple)) or not samples or not all(
            isinstance(s, (list, tuple)) and len(s) == len(export.inputs) for s in samples):
        raise BuildError(f"calibration dataset {recipe.calibration_dataset}: expected a non-empty list of samples, "
                         f"each a list of {len(export.inputs)} tensor(s) in input order")
    return [list(s) for s in samples]
