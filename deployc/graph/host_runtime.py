"""The ExecuTorch runtime on this host, loaded lean.

`executorch.runtime.Runtime` reaches the C++ runtime through `pybindings.portable_lib`, which imports
`executorch.exir` (about 6 s here) only to raise an experimental-API warning. Processes that just run
programs (verification, `deployc run`) load the same C++ extension directly: torch first (the
extension links libtorch), then `_C`. Same kernels, same backends, same results.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


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
