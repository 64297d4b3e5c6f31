"""The ExecuTorch runtime on this host, loaded lean.

`executorch.runtime.Runtime` reaches the C++ runtime through `pybindings.portable_lib`, which imports
`executorch.exir` (about 6 s here) only to raise an experimental-API warning. Processes that just run
programs (verification, `deployc run`) load the same C++ extension directly: torch first (the
extension links libtorch), then `_C`. Same kernels, same backends, same results.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

# A child process that runs programs on this host lowers its own priority by this much (the program's
# backend's host_niceness), before it starts any thread: the threads it starts inherit it.
NICENESS_ENV = "DEPLOYC_NICENESS"


def child_env(niceness: int) -> dict[str, str]:
    """What to add to a program-running child's environment (the verifier, the embed worker)."""
    return {NICENESS_ENV: str(niceness)} if niceness > 0 else {}


def take_niceness() -> None:
    """Called first by such a child: takes the niceness its parent asked for (and keeps it from its own children)."""
    niceness = int(os.environ.pop(NICENESS_ENV, "0") or 0)
    if niceness > 0:
        os.nice(niceness)


def _c() -> Any:
    # Quantized embedding tables run on ExecuTorch's quantized kernels (embedding_byte, embedding_4bit),
    # which the extension does not register itself; this library registers them with its runtime.
    import executorch.kernels.quantized  # noqa: F401
    import torch  # noqa: F401  - loads libtorch for the extension
    from executorch.extension.pybindings import _C

    return _C


def load_program(path: Path, data_path: Path | None = None, etdump: bool = False) -> Any:
    """`etdump`: record every operator and delegate call in an ETDump (`deployc profile`)."""
    from deployc.targets.backends.qnn.host import activate_from_env

    c = _c()
    activate_from_env()  # QNN host libraries chosen by the build or `deployc run`, loaded before any QNN program
    return c._load_program(str(path), enable_etdump=etdump, debug_buffer_size=0,
                           program_verification=c.Verification.InternalConsistency,
                           data_path=str(data_path) if data_path else None)


def load_any(path: Path, data_path: Path | None = None) -> Any:
    """An ExecuTorch .pte, or a LiteRT .tflite (the same load_method interface)."""
    if Path(path).suffix == ".tflite":
        from deployc.graph.litert_runtime import LiteRTProgram

        return LiteRTProgram(Path(path))
    return load_program(path, data_path)
