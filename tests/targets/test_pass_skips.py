"""The edge dialect's passes that act on one kind of operator are skipped where a graph has none
(deployc/targets/backends/pass_skips.py): programs lower to the same bytes with the skips as without them, on models with
transposes and views of every kind (`t`, `transpose`, `permute`, slices, `unsqueeze`, `expand`, `select`, a view
of a buffer written in place), through XNNPACK and the portable kernels: both passes skipped, as such graphs reach
them without what they act on; on a graph that has it (traced at the ATen level) each pass acts. SymToTensorPass
acts on a dynamic length added to a tensor and is skipped elsewhere. One fresh
process: the skips are installed process-wide."""

from __future__ import annotations

import subprocess
import sys

from helpers.projects import REPO

LOWER_BOTH_WAYS = """
import hashlib, torch
from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
from executorch.exir import to_edge, to_edge_transform_and_lower
from deployc.targets.backends import pass_skips
import sys
sys.path.insert(0, "tests")
from helpers.lowering_models import Mlp

class Views(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(6, 8))
        self.register_buffer("state", torch.zeros(4, 6))
    def forward(self, x):
        y = x @ self.w.t()
        self.state[1:3].copy_(y[:2])
        z = y.unsqueeze(0).expand(2, -1, -1).select(0, 1)[:, 1:5]
        return z.transpose(0, 1).permute(1, 0) + self.state.narrow(0, 1, 2).sum()

class Transposed(Mlp):
    def forward(self, x):
        return super().forward(x).t()

class Sized(Mlp):  # a dynamic length added to a tensor: a SymInt where add takes a tensor
    def forward(self, x):
        return super().forward(x) + x.shape[0]

rows = torch.export.Dim("rows", min=2, max=8)
cases = [(Views(), (torch.randn(4, 8),), None), (Transposed(), (torch.randn(2, 8),), None),
         (Sized(), (torch.randn(3, 8),), ({0: rows},))]

def lowered():
    out = []
    for model, example, shapes in cases:
        torch.manual_seed(0)
        with torch.no_grad():
            exported = torch.export.export(model.eval(), example, dynamic_shapes=shapes)
        for program in (to_edge_transform_and_lower(exported, partitioner=[XnnpackPartitioner()]).to_executorch(),
                        to_edge(exported).to_executorch()):  # the portable kernels': no partitioner
            out.append(hashlib.sha256(program.buffer).hexdigest())
    return out

said = {"operator_names": [], "has_view": [], "symbol_for_tensor": []}  # what each skip's test saw, once installed
for name, seen in said.items():
    original = getattr(pass_skips, name)
    setattr(pass_skips, name, lambda gm, original=original, seen=seen: seen.append(original(gm)) or seen[-1])
plain = lowered()
pass_skips.install()
skipping = lowered()
assert skipping == plain, (plain, skipping)
# Exported models reach these passes without either (t is decomposed before them, views made view copies):
# both were skipped in every lowering above.
assert said["operator_names"] and not any(pass_skips.TRANSPOSE in names for names in said["operator_names"])
assert said["has_view"] and not any(said["has_view"]), said["has_view"]
# SymToTensorPass ran where the length meets a tensor argument (the Sized model, both lowerings) and only there.
assert said["symbol_for_tensor"].count(True) == 2, said["symbol_for_tensor"]

# Where a graph has them, the passes act: a graph traced at the ATen level, with t and unsqueeze.
from torch.fx.experimental.proxy_tensor import make_fx
from executorch.exir.passes.normalize_transpose_pass import NormalizeTransposePass
from executorch.exir.passes.replace_broken_ops_with_function_ops_pass import ReplaceBrokenOpsWithFunctionalOpsPass
traced = make_fx(lambda x: x.t().unsqueeze(0) + 1, tracing_mode="fake")(torch.randn(3, 4))
assert pass_skips.operator_names(traced) == {"aten.t.default", "aten.unsqueeze.default", "aten.add.Tensor"}
normalized = NormalizeTransposePass()(traced).graph_module
functional = ReplaceBrokenOpsWithFunctionalOpsPass()(normalized).graph_module
assert pass_skips.operator_names(functional) == {"aten.t_copy.default", "aten.unsqueeze_copy.default",
                                                 "aten.add.Tensor"}, pass_skips.operator_names(functional)
print("same")
"""


def test_programs_lower_to_the_same_bytes_with_the_edge_passes_skipped() -> None:
    r = subprocess.run([sys.executable, "-c", LOWER_BOTH_WAYS], capture_output=True, text=True, cwd=REPO,
                       timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.split()[0] == "same", r.stdout
