"""What a LiteRT program (.tflite) holds, read through the LiteRT interpreter: the operators an app's
LiteRT runtime must provide. The counterpart of `pte` for the build and `inspect`."""

from __future__ import annotations

from pathlib import Path


def operators(path: Path) -> list[str]:
    """The op names a .tflite uses, sorted (the LiteRT kernels an app's runtime must register)."""
    from ai_edge_litert.interpreter import Interpreter

    return sorted({op["op_name"] for op in Interpreter(model_path=str(path))._get_ops_details()})
