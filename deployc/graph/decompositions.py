"""ExecuTorch's decomposition retraces that cannot change the graph, skipped.

`to_edge_transform_and_lower` runs `ExportedProgram.run_decompositions` up to three times on each method when
a partitioner keeps operators from decomposition (XNNPACK does): once with no table (functionalization), once
with the default table less the partitioner's operators, and once more with the whole default table after
the partitioner has claimed the nodes it takes (for the nodes of its operators it declined). Each call
retraces the whole program with fake tensors. On SmolLM2's `gguf` graph the third finds nothing to decompose
and costs as much as the other two: 13.6 s of 81 s lowering the file cut to six layers.

A call is skipped when the program came out of an earlier call in this process and every operator it holds
that the new table would decompose was in that earlier call's table too: it survived that decomposition, so
it is a fixed point of it (`aten.sym_size.int`, whose decomposition emits itself again, is the one seen). The
tables are ExecuTorch's default table and subsets of it, so an operator's decomposition is the same function
in both. The first call (functionalization, an empty table) always runs. tests/graph/test_decompositions.py
lowers models both ways and compares the programs' bytes.
"""

from __future__ import annotations

import weakref
from collections.abc import Mapping
from typing import Any

from deployc.targets.backends.pass_skips import calls

# Each program run_decompositions returned in this process -> the operators its table decomposed.
_DECOMPOSED: weakref.WeakKeyDictionary[Any, frozenset[Any]] = weakref.WeakKeyDictionary()


def redundant(program: Any, table: Mapping[Any, Any] | None) -> bool:
    """Would run_decompositions(table) on `program` leave it as it is?"""
    earlier = _DECOMPOSED.get(program)
    if not table or earlier is None:
        return False
    return all(n.target in earlier for n in calls(program.graph_module) if n.target in table)


def install() -> None:
    """Wrap ExportedProgram.run_decompositions (once per process); called before a program is lowered."""
    from torch.export import ExportedProgram

    original = ExportedProgram.run_decompositions
    if getattr(original, "skips", False):
        return

    def run_decompositions(self: Any, decomp_table: Any = None, *args: Any, **kwargs: Any) -> Any:
        if not args and not kwargs and redundant(self, decomp_table):
            return self
        result = original(self, decomp_table, *args, **kwargs)
        _DECOMPOSED[result] = frozenset(decomp_table or ())
        return result

    run_decompositions.skips = True  # type: ignore[attr-defined]
    ExportedProgram.run_decompositions = run_decompositions  # type: ignore[method-assign]
