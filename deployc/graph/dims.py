"""Why a declared dim range fails, and the edit that passes: torch.export's constraint violations read
back into manifest terms, and (when the eager model itself fails at a verification point) a probe for a
size the model takes, so that torch.export can say which range holds."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from deployc.core.dims import DimPlan
from deployc.core.errors import BuildError

# A multiple_of dim is exported as multiple_of * a dim of this name.
BLOCKS = "_blocks"
# Eager calls spent looking for a size the model takes, per dim.
PROBES = 64


class DimRejected(BuildError):
    """A declared dim range the model does not take; says which dim, and the range that would pass."""

    def __init__(self, message: str, dim: str) -> None:
        super().__init__(message)
        self.dim = dim


_VIOLATION = re.compile(r"Not all values of (\w+) = .*? satisfy the generated guard (.+?)\.?$", re.M)
_FIX_DIM = re.compile(r"^\s*(\w+) = Dim\('\w+'(?:, min=(\d+))?(?:, max=(\d+))?\)\s*$", re.M)
_FIX_DERIVED = re.compile(r"^\s*(\w+) = (\d+)\*(\w+)\s*$", re.M)
_FIX_STATIC = re.compile(r"^\s*(\w+) = (\d+)\s*$", re.M)
_SIZE = re.compile(r"L\[[^\]]*\]\.size\(\)\[\d+\]")


def _flow(d: dict[str, int]) -> str:
    return "{" + ", ".join(f"{k}: {v}" for k, v in d.items()) + "}"


def _suggested(fixes: str, d: DimPlan) -> dict[str, int] | None:
    """The range torch.export's "Suggested fixes" give for `d`, within the declared one."""
    bounds = {m[1]: (int(m[2]) if m[2] else None, int(m[3]) if m[3] else None) for m in _FIX_DIM.finditer(fixes)}
    for m in _FIX_DERIVED.finditer(fixes):
        if m[1] == d.name:
            k = int(m[2]) * d.multiple_of
            lo, hi = bounds.get(m[3], (None, None))
            low = max(-(-d.min // k) * k, k * (lo or 1))
            high = min(d.max // k * k, k * hi if hi is not None else d.max)
            return {"min": low, "max": high, "multiple_of": k} if low <= high else None
    for m in _FIX_STATIC.finditer(fixes):
        if m[1] == d.name:
            return {"min": int(m[2]), "max": int(m[2])}
    for name, (lo, hi) in bounds.items():
        if name in (d.name, d.name + BLOCKS):
            k = d.multiple_of if name != d.name else 1
            low, high = max(d.min, k * (lo or 0)), min(d.max, k * hi if hi is not None else d.max)
            edit = {"min": low, "max": high, **({"multiple_of": k} if d.multiple_of > 1 else {})}
            return edit if low <= high else None
    return None


_ARITHMETIC = re.compile(r"[\d\s+\-*/%()<>=!]*")


def _holds(guard: str, name: str, value: int) -> bool | None:
    """Whether a guard torch.export states (`((-1) + seq) != 1`, `(8*seq) != 120`, `15 <= seq and seq <= 64`)
    holds at `value`; None when it is more than integer arithmetic and comparisons."""
    expr = re.sub(rf"\b{re.escape(name)}\b", str(value), guard)
    if not _ARITHMETIC.fullmatch(re.sub(r"\b(and|or|not)\b", "", expr)):
        return None
    try:
        return bool(eval(expr, {"__builtins__": {}}, {}))  # digits, operators and brackets only (checked above)
    except (SyntaxError, ZeroDivisionError, TypeError):
        return None


def _first_run(guards: list[str], d: DimPlan, low: int, high: int) -> dict[str, int] | None:
    """The lowest range of sizes within low..high (in the dim's steps) where every guard holds, as long as
    it goes; None when a guard cannot be evaluated or no size passes."""
    k = d.multiple_of
    sizes = range(-(-low // k) * k, high // k * k + 1, k)
    if len(sizes) > 100_000:
        return None
    run: list[int] = []
    for v in sizes:
        held = [_holds(g, d.name, v) for g in guards]
        if None in held:
            return None
        if all(held):
            run.append(v)
        elif run:
            break
    if not run:
        return None
    return {"min": run[0], "max": run[-1], **({"multiple_of": k} if k > 1 else {})}


def _from_guard(guard: str, d: DimPlan) -> dict[str, int] | None:
    """An edit for a guard torch.export states without a suggestion: `seq != 64`, `seq % 20 == 0`."""
    k = d.multiple_of
    extra = {"multiple_of": k} if k > 1 else {}
    if m := re.search(r"!= (\d+)", guard):
        n = int(m[1])
        if n - k >= d.min:
            return {"min": d.min, "max": n - k, **extra}
        if n + k <= d.max:
            return {"min": n + k, "max": d.max, **extra}
    if m := re.search(r"% (\d+)\)? == 0", guard):
        step = int(m[1])
        low, high = -(-d.min // step) * step, d.max // step * step
        if low <= high:
            return {"min": low, "max": high, "multiple_of": step}
    return None


def explain_rejected_dims(text: str, dims: list[DimPlan]) -> DimRejected | None:
    """torch.export's "Constraints violated" error as the dim it is about and the edit that passes."""
    by_name = {d.name: d for d in dims} | {d.name + BLOCKS: d for d in dims}
    found = [(by_name[m[1]], _SIZE.sub(by_name[m[1]].name, m[2])) for m in _VIOLATION.finditer(text)
             if m[1] in by_name]
    if not found:
        return None
    d = found[0][0]
    guards = [g for dim, g in found if dim is d]
    fixes = text.split("Suggested fixes:", 1)[1] if "Suggested fixes:" in text else ""
    # torch.export's own plain-range suggestion can break one of its guards ((8*seq) != 120 with min=15),
    # and a guard on an expression of the dim (((-1) + seq) != 1) comes with none: where the guards are
    # plain arithmetic, the lowest range inside the suggestion (or the declared range) where all hold.
    suggested = _suggested(fixes, d)
    if suggested is None or ("multiple_of" not in suggested and not all(
            _holds(g, d.name, v) for g in guards for v in (suggested["min"], suggested["max"]))):
        within = suggested or {"min": d.min, "max": d.max}
        suggested = _first_run(guards, d, within["min"], within["max"]) or suggested
    edit = suggested or next((e for g in guards if (e := _from_guard(g, d))), None)
    declared = f"{d.min}..{d.max}" + (f" in multiples of {d.multiple_of}" if d.multiple_of > 1 else "")
    more = f" (and {len(guards) - 1} more condition(s))" if len(guards) > 1 else ""
    message = f"torch.export rejects {d.name} = {declared}: the model needs {guards[0]}{more}"
    if edit is None:
        return DimRejected(message + "; make the dim static (min = max) or change the model", d.name)
    return DimRejected(f"{message}; this range passes: {d.name}: {_flow(edit)}", d.name)


def _near(d: DimPlan) -> list[int]:
    """Sizes the dim may take, nearest its middle first, at most PROBES of them."""
    k, middle = d.multiple_of, d.middle()
    sizes = sorted(range(d.min, d.max + 1, k), key=lambda s: (abs(s - middle), s))
    return sizes[:PROBES]


def explain_failing_point(dims: list[DimPlan], base: dict[str, int], point: dict[str, int], failure: Exception,
                          runs: Callable[[dict[str, int]], bool], export_at: Callable[[dict[str, int]], Any]
                          ) -> BuildError:
    """The eager model failed at verification point `point`. Find a size it takes (one dim at a time, the
    others at the export sizes `base`), export there with the declared ranges, and return torch.export's
    verdict on them (DimRejected with the edit); else a plain failure naming the point."""
    for d in (d for d in dims if d.max > d.min):
        for size in _near(d):
            candidate = {**base, d.name: size}
            if not runs(candidate):
                continue
            try:
                export_at(candidate)
            except DimRejected as rejected:
                return rejected
            except BuildError:
                pass
            break
    sizes = ", ".join(f"{n} = {v}" for n, v in point.items())
    message = f"the eager model fails at {sizes}: {type(failure).__name__}: {str(failure).strip()[:300]}"
    dynamic = [d for d in dims if d.max > d.min]
    if len(dynamic) == 1:
        return DimRejected(message + "; declare only sizes the model takes", dynamic[0].name)
    return BuildError(message)
