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
in both. tests/graph/test_decompositions.py lowers models each way and compares the programs' bytes.

`ahead` saves one more: where a method lowers under XNNPACK's partitioner, which keeps operators through
ExecuTorch's EDGE_DO_NOT_DECOMP path (a node filter, no transform before decomposition), it decomposes the
exported program once with the table of the second call (the default table less the partitioner's operators),
functionalizing it in the same retrace. The first call (functionalization alone) then finds a program `ahead`
made, functional already, and the second a fixed point of its own table: both are skipped. On SmolLM2's graph
cut to six layers: one retrace where two ran, the same bytes. Vulkan's partitioner takes the same path, but a
program decomposed in one retrace there came out with two independent nodes in another order (the same
computation, other bytes): Vulkan keeps ExecuTorch's two (a backend opts in: `decomposes_ahead`).
"""

from __future__ import annotations

import weakref
from collections.abc import Mapping
from typing import Any

from deployc.targets.backends.pass_skips import calls

# Each program run_decompositions returned in this process -> the operators its table decomposed.
_DECOMPOSED: weakref.WeakKeyDictionary[Any, frozenset[Any]] = weakref.WeakKeyDictionary()
# The programs `ahead` made: functional, and decomposed as to_edge_transform_and_lower's first two calls would.
_AHEAD: weakref.WeakSet[Any] = weakref.WeakSet()


def redundant(program: Any, table: Mapping[Any, Any] | None) -> bool:
    """Would run_decompositions(table) on `program` leave it as it is?"""
    earlier = _DECOMPOSED.get(program)
    if table is None or earlier is None:
        return False
    if not table:  # functionalization alone
        return program in _AHEAD
    return all(n.target in earlier for n in calls(program.graph_module) if n.target in table)


def ahead(programs: Mapping[str, Any], partitioners: list[Any]) -> dict[str, Any]:
    """The methods as to_edge_transform_and_lower's first two decompositions would leave them under
    `partitioners`, each in one retrace; otherwise as given. Only for a backend measured to keep its programs'
    bytes that way (`decomposes_ahead`: XNNPACK). After `install` (else nothing is skipped after it: correct,
    one retrace more)."""
    from executorch.exir.backend.partitioner import Partitioner
    from executorch.exir.program._program import (
        _default_decomposition_table,
        _remove_invalid_ops_for_not_decompose,
    )

    if len(partitioners) != 1:
        return dict(programs)
    partitioner = partitioners[0]
    if type(partitioner).transform_for_pre_decomposition is not Partitioner.transform_for_pre_decomposition:
        return dict(programs)
    out = {}
    for name, program in programs.items():
        kept, node_filter = partitioner.ops_to_not_decompose(program)
        out[name] = program
        if node_filter is None:
            continue
        table = _default_decomposition_table()
        for op in _remove_invalid_ops_for_not_decompose(kept):
            table.pop(op, None)
        decomposed = program.run_decompositions(table)
        # ExecuTorch asks the partitioner on the functionalized program; its answer must not depend on the
        # form (XNNPACK's and Vulkan's list their operators whatever the graph), else this is not its table.
        if set(partitioner.ops_to_not_decompose(decomposed)[0]) == set(kept):
            out[name] = decomposed
            _AHEAD.add(decomposed)
    return out


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
