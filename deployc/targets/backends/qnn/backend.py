"""Qualcomm QNN: the Hexagon NPU (HTP) of Snapdragon SoCs, through ExecuTorch's own QNN backend.

Lowering needs QNN's host libraries on the build machine (qnn_host: a QNN SDK, or the PyPI wheel
onnxruntime-qnn with deployc's compatibility layer); nothing here ever downloads an SDK. The same
libraries contain an x86 emulator of the HTP, so this host's ExecuTorch runtime runs QNN programs
and the build verifies them like any other (not at phone speed, and not bit-exact with a phone).
Static shapes only.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from deployc.core.errors import BuildError
from deployc.core.quantization import Recipe
from deployc.targets.backends.base import USABLE, Availability, BackendBase
from deployc.targets.backends.qnn import host as qnn_host
from deployc.targets.backends.qnn.graph_rewrites import fold_constants, shared_heads_as_gqa, sigmoids_as_tanh
from deployc.targets.backends.qnn.model_rewrites import (
    batch_norm_eps_in_variance,
    one_group_as_layer_norm,
    relu6_as_minimum,
    separate_in_projections,
    strided_nine_by_nine_convs_widened,
    tied_tables_untied,
)
from deployc.targets.backends.qnn.quantizer import (
    QUANT_DTYPES,
    W8A8_16BIT_OPS,
    adjusted,
    op_kind,
    output_layer,
    partitioner,
)
from deployc.targets.backends.qnn.refusals import REFUSED

DEFAULT_SOC = "SM8650"


CONTEXT_BINARY_MAGIC = bytes.fromhex("cdab7856")  # 0x5678abcd, little-endian: a QNN context binary


CONTEXT_STAMP_BYTES = 8


def _soc(options: Mapping[str, Any]) -> str:
    return str(options.get("soc_model", DEFAULT_SOC))


@dataclass(frozen=True)
class Qnn(BackendBase):
    def availability(self, env: Mapping[str, str]) -> Availability:
        libs = qnn_host.find(dict(env))
        if isinstance(libs, str):
            return Availability(usable=False, reason=libs)
        return Availability(usable=True, facts=libs.facts(), source=libs.origin)

    def runs_here(self, env: Mapping[str, str]) -> Availability:
        found = self.availability(env)
        if not found.usable:
            return Availability(usable=False, reason=f"no QNN host libraries to run the HTP emulator: {found.reason}")
        return USABLE

    def check_options(self, options: Mapping[str, Any]) -> list[tuple[str, str, str | None]]:
        socs = qnn_host.soc_table()
        soc = _soc(options)
        if not socs:
            return []  # the installed executorch does not say; lowering will
        if soc not in socs:
            return [("soc_model", f"unknown Qualcomm SoC {soc!r}",
                     f"SoCs ExecuTorch's QNN backend knows: {', '.join(sorted(socs))}")]
        arch = options.get("htp_arch")
        if arch is not None and arch != socs[soc]:
            return [("htp_arch", f"{soc} has HTP v{socs[soc]}, not v{arch}",
                     f"htp_arch: {socs[soc]} (or leave it out)")]
        return []

    def refusal(self, architecture: str, scheme: str) -> str | None:
        schemes, why = REFUSED.get(architecture, (frozenset(), ""))
        return why if schemes is None or scheme in schemes else super().refusal(architecture, scheme)

    def describe(self, recipe: Recipe, options: Mapping[str, Any]) -> str:
        soc = _soc(options)
        if recipe.method == "pt2e":
            sixteen = f", 16-bit activations for {', '.join(sorted(W8A8_16BIT_OPS))}" if recipe.scheme == "w8a8" else ""
            g = recipe.group_size
            weights = (f"linears' 4-bit weights in blocks of {g} inputs (a 4-bit scale a block under one per output "
                       f"channel: QNN's LPBQ) where their inputs divide by {g}, other weights per channel; embedding "
                       f"tables and the output layer in 8 bits"
                       if _blocked(recipe) else "per-channel weights")
            return (f"PT2E QnnQuantizer({QUANT_DTYPES[recipe.scheme]}{sixteen}, {weights}, MinMax "
                    f"activation observers, 16-bit activations over "
                    f"{'twice their calibrated range' if recipe.widen_ranges else 'their calibrated range'}, "
                    f"softmax inputs "
                    f"at their own range and a step of at least 2^-16), calibrated; HTP for {soc}")
        return f"HTP fp16 for {soc}"

    def requirements(self, options: Mapping[str, Any], toolchain: Mapping[str, str]) -> dict[str, str]:
        soc = _soc(options)
        arch = options.get("htp_arch") or qnn_host.soc_table().get(soc)
        out = {"soc_model": soc, "qnn_runtime_min": toolchain.get("qnn", "unknown")}
        if arch:
            out["htp_arch"] = str(arch)
            # From the QNN SDK for Android (aarch64-android and hexagon-v<arch>/unsigned); not ours to ship.
            out["qnn_libraries"] = (f"libQnnHtp.so libQnnSystem.so libQnnHtpV{arch}Stub.so "
                                    f"libQnnHtpV{arch}Skel.so")
        return out

    def child_env(self) -> dict[str, str]:
        return qnn_host.environment()

    # ---- torch side -------------------------------------------------------------------------------------
    def activate(self) -> None:
        import torch  # noqa: F401  - first: the QNN libraries' own libc++ must not come before torch's

        qnn_host.activate()

    def adapt_model(self, model: Any, recipe: Recipe) -> None:
        separate_in_projections(model)
        batch_norm_eps_in_variance(model)
        one_group_as_layer_norm(model)
        relu6_as_minimum(model)
        if recipe.scheme == "fp16":
            strided_nine_by_nine_convs_widened(model)
        if _blocked(recipe):
            tied_tables_untied(model)

    def quantizer(self, recipe: Recipe, options: Mapping[str, Any],
                  activation_bits: Mapping[str, int] | None = None) -> Any:
        """activation_bits: kind of operator -> 8 or 16, where it differs from the scheme's (default: w8a8's
        rule, W8A8_16BIT_OPS at 16); benchmarks/qnn_sensitivity.py passes others to measure them."""
        self.activate()
        from executorch.backends.qualcomm.quantizer.quantizer import (
            ModuleQConfig,
            QnnQuantizer,
            QuantDtype,
        )
        from torchao.quantization.pt2e import MinMaxObserver

        def config(dtype: str) -> dict[str, Any]:
            # With 16-bit activations an embedding table is quantized per row in 8 bits like a linear's weight;
            # QNN's default quantizes it as the gather's 16-bit output (twice the bytes: SmolLM2's table 56.6 MB
            # a method). Not in w8a8: with 8-bit outputs the HTP left such a gather on the CPU.
            return {"quant_dtype": getattr(QuantDtype, dtype), "is_conv_per_channel": True,
                    "is_linear_per_channel": True, "is_embedding_per_channel": dtype == "use_16a8w",
                    "act_observer": MinMaxObserver}

        quantizer = adjusted(QnnQuantizer)()
        quantizer.widen_ranges = recipe.widen_ranges
        if _blocked(recipe):
            quantizer.block_linears = recipe.group_size
        quantizer.set_default_quant_config(**config("use_16a4w_block" if _blocked(recipe)
                                                    else QUANT_DTYPES[recipe.scheme]))
        quantizer.rewrite_clamps = recipe.scheme.startswith("16")  # clamps with 16-bit activations
        if activation_bits is None:
            activation_bits = dict.fromkeys(W8A8_16BIT_OPS, 16) if recipe.scheme == "w8a8" else {}
        dtypes = {16: "use_16a8w", 8: "use_8a8w"}
        def of_kind(bits: int) -> Callable[[Any], bool]:
            return lambda node: activation_bits.get(op_kind(node)) == bits

        def tables(node: Any) -> bool:
            return op_kind(node) == "embedding"

        configs: list[tuple[Callable[[Any], bool], Any]] = [
            (of_kind(bits), ModuleQConfig(**config(dtype))) for bits, dtype in dtypes.items()
            if bits in activation_bits.values()]
        if recipe.scheme == "16a4w":
            # Its tables in 8 bits per row too (4 bits a row would round each token's vector), and its output layer.
            configs.insert(0, (lambda node: tables(node) or output_layer(node), ModuleQConfig(**config("use_16a8w"))))
        quantizer.set_submodule_qconfig_list(configs)
        return quantizer

    def to_edge(self, programs: dict[str, Any], recipe: Recipe, options: Mapping[str, Any],
                constants: Mapping[str, Any]) -> Any:
        self.activate()
        from executorch.backends.qualcomm._passes.qnn_pass_manager import (
            get_qnn_pass_manager_cls,
        )
        from executorch.backends.qualcomm.partition.qnn_partitioner import (
            QnnPartitioner,
            generate_qnn_executorch_option,
        )
        from executorch.backends.qualcomm.serialization.qc_schema import QcomChipset
        from executorch.backends.qualcomm.serialization.qc_schema_serialize import (
            flatbuffer_to_option,
        )
        from executorch.backends.qualcomm.utils.qnn_manager_lifecycle import (
            QnnManagerContext,
        )
        from executorch.backends.qualcomm.utils.utils import (
            generate_htp_compiler_spec,
            generate_qnn_executorch_compiler_spec,
            qnn_edge_config,
        )
        from executorch.exir import to_edge_transform_and_lower

        soc = _soc(options)
        if soc not in QcomChipset.__members__:
            raise BuildError(f"unit option soc_model: unknown Qualcomm SoC {soc!r}")
        specs = generate_qnn_executorch_compiler_spec(
            soc_model=QcomChipset[soc], backend_options=generate_htp_compiler_spec(use_fp16=recipe.scheme == "fp16"))
        # What to_edge_transform_and_lower_to_qnn does, from the programs deployc exported (it would
        # export the model again, strictly).
        backend_type = flatbuffer_to_option(generate_qnn_executorch_option(specs)).backend_options.backend_type
        aten, passes = {}, {}
        for name, program in programs.items():
            ep = fold_constants(program)
            shared_heads_as_gqa(ep.graph_module)
            if recipe.scheme == "fp16":
                sigmoids_as_tanh(ep.graph_module)
            manager = get_qnn_pass_manager_cls(backend_type)()
            aten[name] = manager.transform_for_export_pipeline(ep)
            # Blocked 4-bit linears as 1x1 convolutions, as Qualcomm's LLM export has them: QNN's linear with
            # block-quantized weights computed garbage on the emulator wherever its outputs outnumber its
            # inputs (64 -> 192: 1.3 dB; the same weights as a convolution: as simulated).
            passes[name] = manager.get_to_edge_transform_passes(ep, compiler_specs=specs,
                                                                 convert_linear_to_conv2d=_blocked(recipe))
        constant_methods = {f"get_{k}": v for k, v in sorted(constants.items())} or None
        with QnnManagerContext({name: specs for name in programs}):
            edge = to_edge_transform_and_lower(aten, transform_passes=passes,
                                               partitioner={name: [partitioner(QnnPartitioner, specs)]
                                                            for name in programs},
                                               constant_methods=constant_methods, compile_config=qnn_edge_config())
        unstamp(edge)
        return edge

    def executorch_config(self) -> dict[str, Any]:
        from executorch.backends.qualcomm.utils.utils import (
            get_qnn_context_binary_alignment,
        )

        return {"segment_alignment": get_qnn_context_binary_alignment()}


def _blocked(recipe: Recipe) -> bool:
    """16a4w's linears in blocks of `group_size` inputs (Qualcomm's own 4-bit LLM recipes): one scale per output
    channel rounds a whole row of a decoder's weights at 4 bits."""
    return recipe.scheme == "16a4w" and bool(recipe.group_size)


def unstamp(edge: Any) -> None:
    """QNN context binaries carry an 8-byte stamp after their magic that differs on every compile: replaced by the
    first 8 bytes of the sha256 of the binary with the stamp zeroed, so two builds give the same bytes and
    a program's binaries still differ from each other (docs/qnn.md, "Reproducible programs")."""
    import hashlib

    from executorch.exir.lowered_backend_module import LoweredBackendModule

    for method in edge.methods:
        for _, child in edge.exported_program(method).graph_module.named_children():
            if isinstance(child, LoweredBackendModule) and child.backend_id == "QnnBackend":
                blob = bytearray(child.processed_bytes)
                at = blob.find(CONTEXT_BINARY_MAGIC, 0, 4096)
                if at >= 0:
                    stamp = slice(at + 4, at + 4 + CONTEXT_STAMP_BYTES)
                    blob[stamp] = bytes(CONTEXT_STAMP_BYTES)
                    blob[stamp] = hashlib.sha256(blob).digest()[:CONTEXT_STAMP_BYTES]
                    child._processed_bytes = bytes(blob)


BACKEND = Qnn(
    name="qnn", methods={"w8a8": "pt2e", "16a8w": "pt2e", "16a4w": "pt2e", "fp16": "none"},
    modules=("executorch.backends.qualcomm",),
    partitioners=("QnnPartitioner",), static_shapes_only=True, static_decoders=True,
    # The HTP emulator spreads each call over 8 threads, which gain it 1.47x over one core and slow whatever
    # runs beside it (a one-thread Python loop: 4.79 s alone, 7.73 s beside the emulator). At niceness 10 they
    # yield: the loop 5.37 s, the emulator 28.5 s instead of 26.6 for 12 MiniLM calls
    # (benchmarks/emulator_niceness.py). In a build the CPU LLM's lowering (the critical path) runs beside it.
    host_niceness=10)
