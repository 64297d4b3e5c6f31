"""Qualcomm QNN, the Hexagon NPU of Snapdragon SoCs: the backend (`backend`), its quantizer (`quantizer`),
the rewrites that give the HTP forms it computes right (`model_rewrites`, `graph_rewrites`), the architectures
it refuses (`refusals`), and QNN's host libraries with deployc's compatibility layer (`host`, `qnn_compat.c`)."""

from deployc.targets.backends.qnn.backend import BACKEND

__all__ = ["BACKEND"]
