"""XNNPACK's passes that can act only on certain operators are skipped where a partition has none
(deployc/targets/backends/xnnpack_patterns.py): the operators it takes every SDPA and bilinear pattern to
share are the real patterns' shared operators, and programs lower to the same bytes with the skips as without
them, with the skipped passes acting somewhere (an attention, a bilinear upsample, batch norms fused and
decomposed, a 1-D convolution, a concatenation of six tensors, a dim-order copy, a ReLU after a linear, a
maximum's getitem, the copies of a layout change) and skipped elsewhere. One fresh process for both: the skips are installed process-wide, and the patterns traced
once serve both checks."""

from __future__ import annotations

import subprocess
import sys

from helpers.projects import REPO

LOWER_BOTH_WAYS = """
import hashlib, torch
import torch.nn.functional as F
from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
from executorch.backends.xnnpack.partition.graphs import bilinear_2d, sdpa
from executorch.exir import to_edge_transform_and_lower
from deployc.targets.backends import xnnpack_patterns
import sys
sys.path.insert(0, "tests")
from helpers.lowering_models import Mlp

for patterns, written in ((sdpa.get_graphs(), xnnpack_patterns.SDPA_OPERATORS),
                          (bilinear_2d.get_graphs(), xnnpack_patterns.BILINEAR_OPERATORS)):
    assert patterns
    shared = set.intersection(*(xnnpack_patterns.operator_names(p) for p in patterns))
    assert shared == written, (sorted(shared), sorted(written))

from executorch.backends.xnnpack._passes.fuse_activation_pass import FuseActivationPass
from executorch.exir.passes.dim_order_ops_registry import MemoryFormatOpsMap
assert {str(a._op) for a in FuseActivationPass.FUSEABLE_ACTIVATIONS} == xnnpack_patterns.FUSED_ACTIVATIONS
assert {str(a._op) for a in MemoryFormatOpsMap} == xnnpack_patterns.DIM_ORDER_OPERATORS

class Upsample(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3, padding=1)
    def forward(self, x):  # a maximum over the width first: its getitem folded (RemoveGetItemPass)
        y = self.conv(x)
        y = y + torch.max(y, dim=3, keepdim=True).values
        return F.interpolate(y, scale_factor=2, mode="bilinear", align_corners=False) + F.interpolate(
            y, scale_factor=2, mode="bilinear", align_corners=True)

class Attention(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.qkv = torch.nn.Linear(16, 48)
    def forward(self, x, mask):
        q, k, v = self.qkv(x).view(1, 8, 3, 2, 8).permute(2, 0, 3, 1, 4)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)

class Norms(torch.nn.Module):  # a batch norm after a convolution (fused), one after a ReLU (decomposed), a PReLU
    def __init__(self):
        super().__init__()
        self.conv, self.bn = torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4)
        self.bn2, self.prelu = torch.nn.BatchNorm2d(4), torch.nn.PReLU(4)
    def forward(self, x):
        return self.prelu(self.bn2(torch.relu(self.bn(self.conv(x)))))

class Conv1d(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv1d(4, 6, 3)
    def forward(self, x):
        return torch.relu(self.conv(x))

class Concatenation(torch.nn.Module):  # six tensors at once (split in two), after a dim-order copy
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3, padding=1)
    def forward(self, x):
        y = self.conv(x).to(memory_format=torch.channels_last)
        return torch.cat([y, y * 2, y + 1, y - 1, y * 3, torch.relu(y)], dim=1) + torch.cat([y, y], dim=1).sum()

torch.manual_seed(0)
norms = Norms()
for bn in (norms.bn, norms.bn2):  # statistics of their own, so that folding them changes the weights
    bn.running_mean.uniform_(-1, 1); bn.running_var.uniform_(0.5, 2)
cases = [(Mlp(), (torch.randn(2, 8),)), (Upsample(), (torch.randn(1, 3, 8, 8),)),
         (Attention(), (torch.randn(1, 8, 16), torch.zeros(8, 8).masked_fill(torch.ones(8, 8).triu(1) > 0, -1e4))),
         (norms, (torch.randn(1, 3, 8, 8),)), (Conv1d(), (torch.randn(1, 4, 10),)),
         (Concatenation(), (torch.randn(1, 3, 8, 8),))]

def lowered():
    out = []
    for model, example in cases:
        program = to_edge_transform_and_lower(torch.export.export(model.eval(), example),
                                              partitioner=[XnnpackPartitioner()]).to_executorch()
        out.append(hashlib.sha256(program.buffer).hexdigest())
    return out

calls, long = [], []
original = xnnpack_patterns.operator_names
xnnpack_patterns.operator_names = lambda gm: calls.append(original(gm)) or calls[-1]
original_long = xnnpack_patterns.long_concatenation
xnnpack_patterns.long_concatenation = lambda gm: long.append(original_long(gm)) or long[-1]
plain = lowered()
xnnpack_patterns.install()
skipping = lowered()
assert skipping == plain, (plain, skipping)
assert calls, "the wrapped passes did not run"
assert any(not xnnpack_patterns.BILINEAR_OPERATORS <= c for c in calls), "no partition skipped its patterns"
assert any(xnnpack_patterns.BILINEAR_OPERATORS <= c for c in calls), "the upsample's partition was skipped"
# PReLUReshapePass acts on _prelu_kernel, which reaches no partition in ExecuTorch 1.5.1 (nn.PReLU arrives as
# aten.prelu, the kernel itself decomposed to where/mul): skipped everywhere, the Norms model's bytes the same.
assert not any(xnnpack_patterns.PRELU in c for c in calls) and any("aten.prelu.default" in c for c in calls)
assert True in long and False in long, long
for acting in (xnnpack_patterns.BATCH_NORM_OPERATORS, {xnnpack_patterns.CONVOLUTION},
               xnnpack_patterns.DIM_ORDER_OPERATORS, xnnpack_patterns.FUSED_ACTIVATIONS,
               xnnpack_patterns.INDEXED_MAXIMA, {xnnpack_patterns.COPY}):
    assert any(acting & c for c in calls), f"no partition had {sorted(acting)}"
    assert any(not acting & c for c in calls), f"every partition had {sorted(acting)}"
print("same", len(calls))
"""


def test_the_patterns_share_the_operators_written_and_programs_lower_to_the_same_bytes_with_the_skip() -> None:
    r = subprocess.run([sys.executable, "-c", LOWER_BOTH_WAYS], capture_output=True, text=True, cwd=REPO,
                       timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.split()[0] == "same"
