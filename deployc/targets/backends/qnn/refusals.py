"""Architectures the HTP does not take, by scheme: the planner passes such a unit over before lowering
(docs/qnn.md, "Refused at plan time")."""

from __future__ import annotations

# Architectures (a directory's model_type) the HTP does not take, measured with benchmarks/coverage.py
# --unit npu: the schemes (None: all) and what fails, naming the op. The planner passes the unit over
# before lowering anything (docs/qnn.md, "Refused at plan time").
_W8A8_16A8W = frozenset({"w8a8", "16a8w"})


REFUSED: dict[str, tuple[frozenset[str] | None, str]] = {
    "rt_detr": (_W8A8_16A8W, "QNN's op validation refuses a rank-6 select_copy in int8 (RT-DETR's deformable "
                             "attention: \"has incorrect Rank 6\") and the datatypes of its sampling grid's "
                             "repeats ('Tile'), reshapes and multiplies; the context binary then fails "
                             "(w8a8 and 16a8w; measured 2026-12-04)"),
}
