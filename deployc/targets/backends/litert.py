"""LiteRT (formerly TensorFlow Lite): a second output format. litert-torch converts the eager model to a
.tflite program, which an app runs with the LiteRT runtime it already ships (Android's, MediaPipe,
LiteRT-LM) and the delegate named in the unit's options. Installed as an extra (`deployc[litert]`);
without it the planner passes litert units over with the reason, as for a missing QNN toolchain.

Schemes, mapped onto litert-torch's quantization recipes: fp32 (none), fp16 (float16 weights), 8da8w
(LiteRT's dynamic-range int8: int8 weights, activations quantized at run time) and 8w (int8 weights,
float compute). w8a8 is refused: litert-torch's static int8 makes int8 inputs and outputs that the
caller would have to quantize. Dynamic dims are refused too: litert-torch 0.10 cannot export them
(measured: `aten.arange` with a symbolic bound, the layer-norm lowering and its JAX bridge all assert),
so a litert unit takes static shapes only.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from deployc.core import installed
from deployc.core.errors import BuildError
from deployc.core.quantization import Recipe
from deployc.targets.backends.base import Availability, BackendBase, modules_available

DELEGATES = ("cpu", "gpu")
_RECIPES = {"fp16": "full_fp16_recipe", "8da8w": "full_dynamic_recipe", "8w": "full_weight_only_recipe"}


@dataclass(frozen=True)
class LiteRT(BackendBase):
    def availability(self, env: Mapping[str, str]) -> Availability:
        found = modules_available(self.modules)
        if not found.usable:
            return Availability(usable=False, reason=f"{found.reason} (pip install 'deployc[litert]')")
        # The converter's and the interpreter's versions decide the .tflite bytes: part of program keys.
        facts = {"litert_torch": installed.version("litert-torch"),
                 "ai_edge_litert": installed.version("ai-edge-litert")}
        missing = [k for k, v in facts.items() if v is None]
        if missing:
            return Availability(usable=False, reason=f"{missing[0]} is not installed (pip install 'deployc[litert]')")
        return Availability(usable=True, source="the litert-torch package", facts={k: str(v) for k, v in facts.items()})

    def runs_here(self, env: Mapping[str, str]) -> Availability:
        found = modules_available(("ai_edge_litert",))  # the interpreter, without the converter
        why = "the LiteRT interpreter (ai_edge_litert) is not installed: pip install 'deployc[litert]'"
        return found if found.usable else Availability(usable=False, reason=why)

    def check_options(self, options: Mapping[str, Any]) -> list[tuple[str, str, str | None]]:
        problems: list[tuple[str, str, str | None]] = []
        for name in options:
            if name != "delegate":
                problems.append((name, f"unknown litert option '{name}'", "litert takes `delegate` (cpu or gpu)"))
        delegate = options.get("delegate", "cpu")
        if delegate not in DELEGATES:
            problems.append(("delegate", f"delegate {delegate!r} is not one of: {', '.join(DELEGATES)}", None))
        return problems

    def describe(self, recipe: Recipe, options: Mapping[str, Any]) -> str:
        quant = f", quant_config={_RECIPES[recipe.scheme]}()" if recipe.scheme in _RECIPES else ""
        return f"litert_torch.convert(model, example inputs{quant}) for the {options.get('delegate', 'cpu')} delegate"

    def requirements(self, options: Mapping[str, Any], toolchain: Mapping[str, str]) -> dict[str, str]:
        return {"runtime": "litert", "delegate": str(options.get("delegate", "cpu")),
                "converter": toolchain.get("litert_torch", "")}

    def quant_config(self, recipe: Recipe) -> Any:
        """litert-torch's quantization config for the scheme; None for fp32."""
        if recipe.scheme not in _RECIPES:
            return None
        from litert_torch.generative.quantize import quant_recipes

        return getattr(quant_recipes, _RECIPES[recipe.scheme])()

    def convert(self, model: Any, example: list[Any], recipe: Recipe) -> Any:
        """The converted (and quantized) program, whose `export(path)` writes the .tflite; a BuildError
        naming what the converter could not take (e.g. `Lowering not found: aten.i0.default`)."""
        import litert_torch

        quant = self.quant_config(recipe)
        try:
            return litert_torch.convert(model.eval(), tuple(example), **({"quant_config": quant} if quant else {}))
        except Exception as exc:  # the converter raises anything; its first line names the op
            text = f"{type(exc).__name__}: {exc}".strip()
            raise BuildError(f"litert-torch cannot convert the model: {text.splitlines()[0][:400]}") from exc


BACKEND = LiteRT(
    name="litert", methods={"fp32": "none", "fp16": "converter", "8da8w": "converter", "8w": "converter"},
    modules=("litert_torch", "ai_edge_litert"), partitioners=("litert_torch.convert",), static_shapes_only=True,
    static_shapes_reason="litert-torch 0.10 cannot export dynamic dims", format="tflite", multi_method=False)
