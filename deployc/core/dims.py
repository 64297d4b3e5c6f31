"""A symbolic dim's range as the plan fixes it: what export makes dynamic and a program's facts record."""

from __future__ import annotations

from deployc.core.records import Frozen


class DimPlan(Frozen):
    name: str
    min: int  # the smallest size the dim takes (a multiple of multiple_of)
    max: int
    multiple_of: int = 1

    def middle(self) -> int:
        """The size halfway between min and max, rounded down to a size the dim takes."""
        k = self.multiple_of
        return self.min + (self.max - self.min) // 2 // k * k
