"""ExecuTorch's decomposition retraces that cannot change a program are skipped
(deployc/graph/decompositions.py): programs lower to the same bytes with the skips as without them, and
decomposed `ahead` in one retrace (XNNPACK) as in ExecuTorch's two; the skip taken on models whose
last retrace finds nothing to decompose (a dynamic length, a cache written in place) and not taken where it
has work (a linear XNNPACK declines: its weight is an input). One fresh process: the skip is installed
process-wide."""

from __future__ import annotations

import subprocess
import sys

from helpers.projects import REPO

LOWER_BOTH_WAYS = """
import hashlib, torch
from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
from executorch.exir import to_edge_transform_and_lower
from torch.export import Dim, ExportedProgram
from deployc.graph import decompositions
import sys
sys.path.insert(0, "tests")
from helpers.lowering_models import Mlp

class Cached(torch.nn.Module):  # a cache written in place at the call's positions, over a dynamic length
    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(8, 8)
        self.register_buffer("cache", torch.zeros(1, 16, 8))
    def forward(self, x, pos):
        self.cache.index_copy_(1, pos, self.proj(x))
        scores = torch.softmax(x @ self.cache.transpose(1, 2), dim=-1)
        return torch.nn.functional.silu(scores @ self.cache)

class InputWeight(torch.nn.Module):  # a linear whose weight is an input: XNNPACK declines it
    def forward(self, x, w):
        return torch.nn.functional.linear(torch.relu(x), w)

seq = Dim("seq", min=1, max=16)
cases = [(Cached(), (torch.randn(1, 4, 8), torch.arange(4)), ({1: seq}, {0: seq})),
         (Mlp(), (torch.randn(2, 8),), None),
         (InputWeight(), (torch.randn(2, 8), torch.randn(4, 8)), None)]

def lowered(ahead=False):
    out = []
    for model, example, shapes in cases:
        torch.manual_seed(0)
        with torch.no_grad():
            exported = torch.export.export(model.eval(), example, dynamic_shapes=shapes)
        programs = {"forward": exported}
        if ahead:
            programs = decompositions.ahead(programs, [XnnpackPartitioner()])
        program = to_edge_transform_and_lower(programs, partitioner=[XnnpackPartitioner()]).to_executorch()
        out.append(hashlib.sha256(program.buffer).hexdigest())
    return out

plain = lowered()
decompositions.install()
said = []  # per call with a table (an empty one too): skipped?
original = decompositions.redundant
def redundant(program, table):
    skip = original(program, table)
    if table is not None:
        said.append(skip)
    return skip
decompositions.redundant = redundant
skipping = lowered()
assert skipping == plain, (plain, skipping)
# Three calls per model: functionalization ({}) runs; of the two with a table, the cache's first has work
# (index_copy, silu, softmax), its last none; the MLP's both none; the declined linear's last has its
# decomposition to do.
assert said == [False, False, True, False, True, True, False, True, False], said
said.clear()
assert lowered(ahead=True) == plain
# Four per model: ahead's own (work), then functionalization and the second call skipped; the last as before.
assert said == [False, True, True, True, False, True, True, True, False, True, True, False], said
# Vulkan's programs keep ExecuTorch's retraces (one retrace there reorders independent nodes).
from deployc.targets.backends import BACKENDS
assert BACKENDS["xnnpack"].decomposes_ahead and not BACKENDS["vulkan"].decomposes_ahead
print("same")
"""


def test_programs_lower_to_the_same_bytes_with_redundant_decompositions_skipped() -> None:
    r = subprocess.run([sys.executable, "-c", LOWER_BOTH_WAYS], capture_output=True, text=True, cwd=REPO,
                       timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.split()[-1] == "same", r.stdout
