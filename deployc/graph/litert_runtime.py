"""LiteRT programs (.tflite) on this host, through the LiteRT interpreter (`ai_edge_litert`), behind the
same small interface as an ExecuTorch program: `load_method(name)` gives a callable from a list of
torch tensors to a list of torch tensors. Integer inputs are cast to the dtype the .tflite declares
(litert-torch turns int64 token ids into int32), so callers pass what the manifest declares."""

from __future__ import annotations

from pathlib import Path
from typing import Any


class LiteRTMethod:
    def __init__(self, interpreter: Any, signature: str) -> None:
        import numpy as np

        self._np = np
        self._runner = interpreter.get_signature_runner(signature)
        details = self._runner.get_input_details()
        names = interpreter.get_signature_list()[signature]
        self._inputs = [(name, details[name]["dtype"]) for name in names["inputs"]]
        self._outputs = list(names["outputs"])

    def __call__(self, inputs: list[Any]) -> list[Any]:
        import torch

        if len(inputs) != len(self._inputs):
            raise RuntimeError(f"the LiteRT signature takes {len(self._inputs)} inputs, got {len(inputs)}")
        feed = {name: self._np.ascontiguousarray(t.detach().numpy() if hasattr(t, "detach") else t).astype(dtype)
                for (name, dtype), t in zip(self._inputs, inputs)}
        try:
            out = self._runner(**feed)
        except ValueError as exc:  # the interpreter's shape/dtype complaints, as the ExecuTorch runtime's
            raise RuntimeError(str(exc)) from exc
        return [torch.from_numpy(self._np.array(out[name])) for name in self._outputs]


class LiteRTProgram:
    def __init__(self, path: Path) -> None:
        from ai_edge_litert.interpreter import Interpreter

        try:
            self._interpreter = Interpreter(model_path=str(path), num_threads=None)
        except (ValueError, RuntimeError) as exc:
            raise RuntimeError(f"LiteRT cannot load {path.name}: {exc}") from exc

    def load_method(self, name: str) -> LiteRTMethod:
        signatures = self._interpreter.get_signature_list()
        signature = "serving_default" if name == "forward" else name
        if signature not in signatures:
            raise RuntimeError(f"the .tflite has no signature {signature!r} (it has {', '.join(signatures)})")
        return LiteRTMethod(self._interpreter, signature)
