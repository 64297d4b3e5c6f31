"""The types of values that flow between pipeline stages. Pure data; validate, plan and packaging read it.

A reference is either a pipeline input name (`query`) or `stage.port`. Port types: text, image and audio
(files given to the pipeline), chunks (retrieved passages), or a tensor (dtype, shape) with symbolic sizes.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Port:
    kind: str  # text | image | audio | chunks | tensor
    dtype: str = ""
    shape: tuple[int | str, ...] = ()

    def __str__(self) -> str:
        if self.kind != "tensor":
            return self.kind
        return f"tensor {self.dtype}[{', '.join(map(str, self.shape))}]"


TEXT, CHUNKS = Port("text"), Port("chunks")
