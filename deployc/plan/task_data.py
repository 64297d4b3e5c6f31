"""The samples a program's task measures are computed on (`verify.data`): an .npz file with one array per
model input, named after it, samples along the first axis. Checked at plan time against the model's
inputs (numpy only: planning imports no torch), so a file that does not fit is a located error before
anything is built."""

from __future__ import annotations

import zipfile
import zlib
from pathlib import Path
from typing import Any

from deployc.load.manifest import TASK_MEASURES
from deployc.plan.build_plan import DimPlan, InputPlan

__all__ = ["TASK_MEASURES", "check"]

def _fits(size: int, declared: int | str, dims: dict[str, DimPlan]) -> bool:
    if isinstance(declared, int):
        return size == declared
    d = dims.get(declared)
    return d is not None and d.min <= size <= d.max and (size - d.min) % d.multiple_of == 0


def _shape_words(shape: list[int | str], dims: dict[str, DimPlan]) -> str:
    ranges = [f"{n} {dims[n].min}..{dims[n].max}" for n in shape if isinstance(n, str) and n in dims]
    return f"[{', '.join(map(str, shape))}]" + (f" ({', '.join(ranges)})" if ranges else "")


def check(path: Path, inputs: list[InputPlan], dims: list[DimPlan], measure: str) -> tuple[int, str | None]:
    """(samples in the file, None), or (0, what does not fit, naming the input and what was found)."""
    import numpy as np

    by_name = {d.name: d for d in dims}
    if not path.is_file():
        return 0, "no such file next to the manifest"
    try:
        return _check(np.load(path, allow_pickle=False), inputs, by_name, measure)
    except (OSError, ValueError, EOFError, zipfile.BadZipFile, zlib.error) as exc:  # a cut or damaged file
        return 0, f"not an .npz file numpy can read, or truncated or damaged ({type(exc).__name__}: {exc})"


def _check(archive: Any, inputs: list[InputPlan], by_name: dict[str, DimPlan], measure: str) -> tuple[int, str | None]:
    if not hasattr(archive, "files"):
        return 0, "holds one array; an .npz file with one array per input is needed"
    with archive:
        names = [i.name for i in inputs]
        missing = [n for n in names if n not in archive.files]
        if missing:
            present = ", ".join(archive.files) or "none"
            return 0, (f"has no array for input(s) {', '.join(missing)} (it has: {present}); name each array after "
                       "the input it feeds")
        counts = set()
        for spec in inputs:
            array = archive[spec.name]
            found = list(array.shape)
            if not found or len(found) != len(spec.shape) + 1 or not all(
                    _fits(n, d, by_name) for n, d in zip(found[1:], spec.shape)):
                expected = _shape_words(spec.shape, by_name)
                return 0, f"input {spec.name}: shape {found} found; expected [samples, *{expected}] (samples first)"
            if array.dtype.name != spec.dtype:
                return 0, f"input {spec.name}: dtype {array.dtype.name} found; the model takes {spec.dtype}"
            counts.add(found[0])
        if len(counts) != 1:
            return 0, f"the inputs' arrays hold different numbers of samples ({', '.join(map(str, sorted(counts)))})"
        samples = counts.pop()
    if samples < (2 if measure == "topk" else 1):
        return 0, f"{samples} sample(s); neighbours need at least 2"
    return samples, None
