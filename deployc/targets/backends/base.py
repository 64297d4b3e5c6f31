"""What every backend module shares: whether a thing works here, the recipe lookup, and the lowering
path most delegates take. Nothing here imports torch at module level: `validate` and `plan` read the
registry; the build calls the methods that import executorch and torchao."""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from deployc.core.errors import BuildError
from deployc.core.quantization import (
    DEFAULT_CALIBRATION_SAMPLES,
    DEFAULT_GROUP_SIZE,
    SCHEMES,
    Method,
    QuantSpec,
    Recipe,
)
from deployc.core.records import Frozen


class Availability(Frozen):
    usable: bool
    reason: str = ""  # why not, when not usable
    source: str = ""  # where the toolchain comes from, for people (QNN: an SDK or a PyPI wheel)
    facts: dict[str, str] = {}  # what of it enters the program keys (QNN: its version, the layer's hash)


USABLE = Availability(usable=True)


def _installed(module: str) -> bool:
    """Whether `module` is installed, without importing it or its parent packages (find_spec of
    a dotted name would run the parents' __init__)."""
    top, *rest = module.split(".")
    try:
        spec = importlib.util.find_spec(top)
    except (ImportError, ValueError):  # set to None in sys.modules, or a broken install
        return False
    if spec is None:
        return False
    if not rest:
        return True
    for root in spec.submodule_search_locations or []:
        base = Path(root).joinpath(*rest)
        if base.with_suffix(".py").is_file() or base.is_dir():  # a module, a package or a namespace package
            return True
    return False


def modules_available(modules: tuple[str, ...]) -> Availability:
    """Whether every Python module is installed."""
    for module in modules:
        if not _installed(module):
            return Availability(usable=False, reason=f"Python module {module} is not installed")
    return USABLE


@dataclass(frozen=True)
class BackendBase:
    """Defaults for a backend whose ahead-of-time toolchain ships in the executorch wheel and that
    lowers through `to_edge_transform_and_lower` with its partitioners."""

    name: str
    methods: Mapping[str, Method]  # scheme -> how the build applies it
    modules: tuple[str, ...] = ()  # Python modules the ahead-of-time path imports
    helpers: tuple[str, ...] = ()  # files beside its module that belong to it (hashed with it into program keys)
    partitioners: tuple[str, ...] = ()  # names of what `partitioner_objects` builds, for plans and reports
    static_shapes_only: bool = False
    static_shapes_reason: str = ""  # why, when it is the converter's limit rather than the hardware's
    quantized_embeddings: frozenset[str] = frozenset()  # schemes whose embedding tables it quantizes too
    delegate_id: str = ""  # the id its delegates carry in a .pte ("" when it makes none)
    not_run_here: str = ""  # why this host's executorch.runtime cannot execute its programs ("": it can)
    external_weights: bool = False  # can put its weights in a .ptd data file (ExecuTorch named data)
    format: str = "pte"  # the program file it makes: pte (ExecuTorch) or tflite (LiteRT)
    multi_method: bool = True  # builds further methods and constant methods into one program
    # Takes text-generation models only in their static form (graph/static_decoder.py): KV caches as inputs
    # and outputs, fixed chunks. The manifest's `npu:` gives the chunk and the context.
    static_decoders: bool = False
    # Its programs run on the device's CPU through the kernels of ExecuTorch's runtime: on an arm64 device
    # the build also runs them on the aarch64 wheel's runtime under qemu (targets/arm64_runner.py).
    arm64_checked: bool = False
    # What verifies its programs when this host's runtime cannot run them: their lowered graph executed
    # in PyTorch with the backend's reference kernels (said in every report); "": the runtime runs them.
    host_reference: str = ""
    # The niceness of the child processes that run its programs on this host (verification, a corpus's
    # embedding): above 0 where an emulator's threads would take the cores from the build's lowering.
    host_niceness: int = 0
    # Runs float operators beside int8 ones in one program, so a static scheme may leave its most sensitive
    # operators float (quantization.float_fallback; graph/sensitivity.py).
    float_fallback: bool = False
    # Its partitioners' decompositions may be made in one retrace ahead of `to_edge_transform_and_lower`
    # (graph/decompositions.py's `ahead`): measured to leave its programs' bytes as they are.
    decomposes_ahead: bool = False
    # The name of its ExecuTorch BackendDetails class when the preprocess of its partitions may run in forked
    # processes beside the build's (graph/preprocess.py): measured to keep its programs' bytes ("": never).
    forked_preprocess: str = ""

    @property
    def schemes(self) -> frozenset[str]:
        return frozenset(self.methods)

    def availability(self, env: Mapping[str, str]) -> Availability:
        return modules_available(self.modules)

    def runs_here(self, env: Mapping[str, str]) -> Availability:
        """Whether this host's ExecuTorch runtime executes its programs (so the build can verify them)."""
        return Availability(usable=False, reason=self.not_run_here) if self.not_run_here else USABLE

    def check_options(self, options: Mapping[str, Any]) -> list[tuple[str, str, str | None]]:
        """Problems with a profile unit's `options`: (option name, message, hint)."""
        return []

    def refusal(self, architecture: str, scheme: str) -> str | None:
        """Why this backend cannot build a Hugging Face `model_type` in `scheme`, known before lowering."""
        return EXECUTORCH_REFUSED.get(architecture) if self.format == "pte" else None

    def recipe(self, quant: QuantSpec) -> Recipe | None:
        """The recipe for a manifest's quantization; None when this backend cannot build the scheme."""
        name = quant.fixed
        method = self.methods.get(name)
        if method is None:
            return None
        scheme = SCHEMES[name]
        cal = quant.calibration
        return Recipe(
            scheme=name, method=method,
            group_size=(quant.group_size or DEFAULT_GROUP_SIZE) if scheme.grouped else None,
            embedding_bits=scheme.weight_bits if quant.embeddings and name in self.quantized_embeddings
            else None,
            calibration_samples=(cal.samples if cal else DEFAULT_CALIBRATION_SAMPLES) if scheme.calibrated else None,
            calibration_seed=(cal.seed if cal else 0) if scheme.calibrated else None,
            calibration_dataset=cal.dataset if cal and scheme.calibrated else None,
            calibration_text=cal.text if cal and scheme.calibrated else None,
            float_fallback=quant.float_fallback or None if scheme.calibrated and self.float_fallback else None,
        )

    def describe(self, recipe: Recipe, options: Mapping[str, Any]) -> str:
        """What `quantizer` builds, in words, for `deployc plan`."""
        return "no quantization" if recipe.method == "none" else f"{recipe.method} {recipe.scheme}"

    def requirements(self, options: Mapping[str, Any], toolchain: Mapping[str, str]) -> dict[str, str]:
        """What a device needs for this backend's programs beyond the ExecuTorch runtime (for the runtime
        config): an SoC, a driver version, libraries to ship. `toolchain`: the backend's availability facts."""
        return {}

    def child_env(self) -> dict[str, str]:
        """Environment a process needs to run this backend's programs on this host (none for most)."""
        return {}

    # ---- torch side: called in build workers only ----------------------------------------------------
    def activate(self) -> None:
        """Prepare this process, and the ones it starts (the verifier), before a program is built."""

    def adapt_model(self, model: Any, recipe: Recipe) -> None:
        """Rewrite the loaded model where this backend cannot take its form in `recipe`, keeping what it
        computes (eager's references come from the rewritten model). None by default."""

    def quantizer(self, recipe: Recipe, options: Mapping[str, Any]) -> Any:
        """The torchao config (method torchao) or PT2E quantizer (method pt2e) for `recipe`."""
        raise BuildError(f"backend {self.name} has no quantizer for scheme {recipe.scheme}")

    def embedding_quantizer(self, recipe: Recipe) -> Any:
        """The torchao config for the model's embedding tables (recipe.embedding_bits is set)."""
        assert recipe.embedding_bits is not None
        return embedding_weights(recipe.embedding_bits, recipe.group_size)

    def partitioner_objects(self, recipe: Recipe, options: Mapping[str, Any]) -> list[Any]:
        return []

    def to_edge(self, programs: dict[str, Any], recipe: Recipe, options: Mapping[str, Any],
                constants: Mapping[str, Any]) -> Any:
        """The lowered EdgeProgramManager (before to_executorch) of a program's methods."""
        return lower_with_partitioners(programs, self.partitioner_objects(recipe, options), constants)

    def convert(self, model: Any, example: list[Any], recipe: Recipe) -> Any:
        """A whole program made from the eager model by the backend's own converter (format other than pte),
        whose `export(path)` writes the file."""
        raise BuildError(f"backend {self.name} lowers through ExecuTorch (to_edge), not a converter of its own")

    def executorch_config(self) -> dict[str, Any]:
        """Arguments for ExecutorchBackendConfig (e.g. how delegate segments are aligned)."""
        return {}

    def weight_bytes(self, payload: bytes) -> tuple[int, int, int]:
        """(quantized weights, float weights, scales) bytes inside one of its delegate payloads; all zero
        when the payload is opaque (it then counts as the rest of the file)."""
        return 0, 0, 0



# Architectures no ExecuTorch backend lowers, by a directory's model_type: none known today. (FNet's FFT
# was, until graph/fourier.py wrote its real part as matmuls.)
EXECUTORCH_REFUSED: dict[str, str] = {}


def lower_with_partitioners(programs: dict[str, Any], partitioners: list[Any], constants: Mapping[str, Any]) -> Any:
    from executorch.exir import EdgeCompileConfig, to_edge_transform_and_lower

    constant_methods = {f"get_{k}": v for k, v in sorted(constants.items())} or None
    # The edge dialect's verifier re-runs every operator on fake tensors after each pass: ~20% of lowering a
    # decoder (SmolLM2's 4-layer cut: 122-130 s -> 100 s, the same .pte bytes). What it would catch, the
    # program's run on the runtime catches: every program is executed and judged before it ships.
    return to_edge_transform_and_lower(programs, partitioner=partitioners, constant_methods=constant_methods,
                                       compile_config=EdgeCompileConfig(_check_ir_validity=False))


def int8_dynamic_activations(weight_bits: int, group_size: int | None) -> Any:
    """torchao's int8 dynamic activations with int8 (per channel) or int4 (grouped) weights."""
    import torch
    from torchao.quantization import Int8DynamicActivationIntxWeightConfig
    from torchao.quantization.granularity import PerAxis, PerGroup

    return Int8DynamicActivationIntxWeightConfig(
        weight_dtype=torch.int8 if weight_bits == 8 else torch.int4,  # type: ignore[attr-defined]  # runtime-only dtype
        weight_granularity=PerAxis(0) if group_size is None else PerGroup(group_size))


def describe_int8_dynamic_activations(weight_bits: int, group_size: int | None) -> str:
    granularity = "PerAxis(0)" if group_size is None else f"PerGroup({group_size})"
    return (f"torchao Int8DynamicActivationIntxWeightConfig(weight_dtype=int{weight_bits}, "
            f"weight_granularity={granularity})")


def embedding_weights(bits: int, group_size: int | None) -> Any:
    """torchao's weight-only config for embedding tables: int8 per row, or int4 in groups. ExecuTorch
    fuses the dequantize + embedding it exports into its quantized embedding kernels."""
    import torch
    from torchao.quantization.granularity import PerAxis, PerGroup
    from torchao.quantization.quant_api import IntxWeightOnlyConfig

    # torch.int4 exists at runtime (torch 2.13) but not in torch's type stubs.
    return IntxWeightOnlyConfig(weight_dtype=torch.int8 if bits == 8 else torch.int4,  # type: ignore[attr-defined]
                                granularity=PerAxis(0) if bits == 8 or group_size is None else PerGroup(group_size))


def describe_embedding_weights(bits: int, group_size: int | None) -> str:
    granularity = "PerAxis(0)" if bits == 8 or group_size is None else f"PerGroup({group_size})"
    return f"embeddings IntxWeightOnlyConfig(weight_dtype=int{bits}, granularity={granularity})"
