"""Deterministic example inputs within the declared value ranges, at a chosen size for every dim."""

from __future__ import annotations

from pathlib import Path

import torch

from deployc.core.errors import BuildError
from deployc.plan.build_plan import DimPlan, InputPlan

DTYPES = {
    "float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16, "int64": torch.int64,
    "int32": torch.int32, "int16": torch.int16, "int8": torch.int8, "uint8": torch.uint8, "bool": torch.bool,
}


def export_point(dims: list[DimPlan]) -> dict[str, int]:
    """Sizes for the export example. Never 1 where the dim may grow: torch.export specializes size 1."""
    point = {}
    for d in dims:
        mid = d.middle()
        point[d.name] = max(mid, 2) if d.max >= 2 else mid
    return point


def make_inputs(inputs: list[InputPlan], point: dict[str, int], seed: int) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    out = []
    for spec in inputs:
        shape = [point[s] if isinstance(s, str) else s for s in spec.shape]
        dtype = DTYPES[spec.dtype]
        low, high = spec.range
        if spec.fill == "arange":
            out.append(torch.arange(shape[-1] if shape else 1).expand(shape).contiguous().to(dtype))
        elif dtype.is_floating_point:
            t = torch.rand(shape, generator=gen, dtype=torch.float32) * (high - low) + low
            out.append(t.to(dtype))
        elif dtype == torch.bool:
            out.append(torch.randint(int(low), int(high) + 1, shape, generator=gen).bool())
        else:
            out.append(torch.randint(int(low), int(high) + 1, shape, generator=gen, dtype=torch.int64).to(dtype))
    return out


def task_samples(path: Path, sha256: str, inputs: list[InputPlan]) -> list[tuple[dict[str, int], list[torch.Tensor]]]:
    """The manifest's task samples (`verify.data`, checked at plan time): per sample, the sizes of its
    dims and its inputs in call order, each with the sample axis put back as the model's batch of one."""
    import numpy as np

    from deployc.core.digests import file_sha256

    if file_sha256(path) != sha256:
        raise BuildError(f"verification data {path.name} changed since the plan was made")
    with np.load(path, allow_pickle=False) as archive:
        arrays = [archive[i.name] for i in inputs]
    out = []
    for j in range(arrays[0].shape[0]):
        tensors = [torch.from_numpy(np.ascontiguousarray(a[j])) for a in arrays]
        dims = {d: int(t.shape[axis]) for i, t in zip(inputs, tensors)
                for axis, d in enumerate(i.shape) if isinstance(d, str)}
        out.append((dims, tensors))
    return out
