"""Portable: ExecuTorch's reference kernels, no delegate. Runs anywhere the runtime does."""

from __future__ import annotations

from deployc.targets.backends.base import BackendBase

BACKEND = BackendBase(name="portable", methods={"fp32": "none"}, modules=("executorch.exir",), external_weights=True,
                      arm64_checked=True)
