"""The backend registry: one module per ExecuTorch backend, each a `Backend`, gathered in a plain dict
whose keys are also the schema's allowed backend names. Adding a backend is one new module in this
package and one entry in `BACKENDS`.

Nothing here imports torch: `validate` and `plan` read names, schemes and availability; build workers
call `quantizer` and `to_edge`, which import executorch and torchao themselves.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol

from deployc.core.quantization import QuantSpec, Recipe
from deployc.targets.backends import cortex_m, litert, portable, qnn, vulkan, xnnpack
from deployc.targets.backends.base import Availability


class Backend(Protocol):
    """What the planner, the build, packaging and the runtimes call on a backend (BackendBase has defaults)."""

    name: str
    partitioners: tuple[str, ...]
    static_shapes_only: bool
    static_shapes_reason: str  # why, when it is the converter's limit rather than the hardware's
    external_weights: bool  # can put its weights in a .ptd data file
    format: str  # the program file it makes: pte (ExecuTorch) or tflite (LiteRT)
    multi_method: bool
    static_decoders: bool  # takes text-generation models only in their static form (manifest `npu:`)
    arm64_checked: bool  # its programs run on an arm64 device's CPU: checked on ExecuTorch's arm64 runtime too
    decomposes_ahead: bool  # its partitioners' decompositions may be made in one retrace (graph/decompositions.py)
    forked_preprocess: str  # its BackendDetails class, when partitions may be preprocessed in forked processes
    host_reference: str  # what runs its lowered graphs on the host when the runtime cannot ("": none)
    host_niceness: int  # of the child processes that run its programs on this host (0: the build's own)
    modules: tuple[str, ...]  # Python modules its ahead-of-time path imports
    helpers: tuple[str, ...]  # files beside its module that belong to it (hashed with it into program keys)

    @property
    def schemes(self) -> frozenset[str]: ...

    def availability(self, env: Mapping[str, str]) -> Availability:
        """Whether its ahead-of-time toolchain is usable on this machine (read, never installed)."""
        ...

    def runs_here(self, env: Mapping[str, str]) -> Availability:
        """Whether this host's ExecuTorch runtime executes its programs, and why not."""
        ...

    def check_options(self, options: Mapping[str, Any]) -> list[tuple[str, str, str | None]]: ...

    def recipe(self, quant: QuantSpec) -> Recipe | None: ...

    def refusal(self, architecture: str, scheme: str) -> str | None:
        """Why this backend cannot build the architecture (a transformers model_type) in the scheme, as
        measured: the planner passes the unit over with this reason, before any lowering. None: it can."""
        ...

    def describe(self, recipe: Recipe, options: Mapping[str, Any]) -> str: ...

    def requirements(self, options: Mapping[str, Any], toolchain: Mapping[str, str]) -> dict[str, str]: ...

    def child_env(self) -> dict[str, str]: ...

    def activate(self) -> None: ...

    def adapt_model(self, model: Any, recipe: Recipe) -> None: ...

    def quantizer(self, recipe: Recipe, options: Mapping[str, Any]) -> Any: ...

    def embedding_quantizer(self, recipe: Recipe) -> Any: ...

    def partitioner_objects(self, recipe: Recipe, options: Mapping[str, Any]) -> list[Any]:
        """The partitioners `to_edge` lowers under (none where it lowers otherwise)."""
        ...

    def to_edge(self, programs: dict[str, Any], recipe: Recipe, options: Mapping[str, Any],
                constants: Mapping[str, Any]) -> Any: ...

    def convert(self, model: Any, example: list[Any], recipe: Recipe) -> Any:
        """Formats other than pte: the backend's own converter makes the whole program."""
        ...

    def executorch_config(self) -> dict[str, Any]: ...

    @property
    def delegate_id(self) -> str: ...

    def weight_bytes(self, payload: bytes) -> tuple[int, int, int]: ...


_MODULES = (  # the registry: one line per backend module, in the order `deployc targets` lists them
    xnnpack,
    vulkan,
    cortex_m,
    portable,
    qnn,
    litert,
)

BACKENDS: dict[str, Backend] = {m.BACKEND.name: m.BACKEND for m in _MODULES}

# Each backend's module (a package's __init__.py).
BACKEND_FILES: dict[str, Path] = {m.BACKEND.name: Path(str(m.__file__)) for m in _MODULES}


def backend_files(name: str) -> list[Path]:
    """The files a backend is made of, whose hash is part of every program key it builds: its module and the
    helpers it names beside it, or every source file of its package."""
    module = BACKEND_FILES[name].resolve()
    if module.name == "__init__.py":
        return sorted(p for p in module.parent.rglob("*") if p.suffix in (".py", ".c") and "__pycache__" not in p.parts)
    return [module, *(module.parent / h for h in BACKENDS[name].helpers)]

# The registry's keys, for the profile schema's allowed values (to the type checker: a backend's name).
if TYPE_CHECKING:
    BackendName = str
else:
    BackendName = Literal[tuple(BACKENDS)]
