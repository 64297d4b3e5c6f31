"""Build one program of a plan, end to end, into a folder. Runs inside a worker process.

load -> example inputs + eager references -> quantize/export -> lower -> serialize -> verify (in a
child process) -> facts. A verification that missed its tolerance is a fact, not a failure (rebuilding
would give the same bytes); a step that raises fails the program. Library output (torchao, torch, the
runtime's C++ logging) goes to the unit's log file, not the user's terminal. build/program_job.py puts
what this makes into the cache.
"""

from __future__ import annotations

import functools
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, ParamSpec, TypeVar

from deployc.core import self_test_vectors
from deployc.core.errors import BuildError
from deployc.core.events import Event, EventSink
from deployc.core.facts import (
    ETRECORD_FILE,
    FACTS_FILE,
    PROGRAM_DATA_FILE,
    PROGRAM_FILE,
    ProgramFacts,
    Signature,
    TensorFacts,
)
from deployc.core.faults import fault_point
from deployc.core.library_output import captured
from deployc.plan.build_plan import NOT_JUDGED_SQNR, Export, UnitPlan

if TYPE_CHECKING:
    from deployc.graph.verify import TaskChecks

P = ParamSpec("P")
R = TypeVar("R")
_sink: EventSink | None = None  # where step events go; set by the executor that hosts this process


def set_event_sink(sink: EventSink | None) -> None:
    global _sink
    _sink = sink


def _one_thread(make: Callable[P, R]) -> Callable[P, R]:
    """`make` with torch on one intra-op thread, restored after. A program's bytes depend on the float values
    its build computes (calibration ranges, the float fallback's choice, the self-test vectors), and torch
    sums a convolution's products in an order that depends on its thread count: MixNet's calibrated scales
    differed between 1 and 2 threads (its held-out int8 worst 9.8 / 11.9 dB). Pinned, the bytes do not
    depend on the machine's cores, on --jobs or on the process (worker, ETRecord rebuild, a test)."""

    @functools.wraps(make)
    def pinned(*args: P.args, **kwargs: P.kwargs) -> R:
        import torch

        before = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            return make(*args, **kwargs)
        finally:
            torch.set_num_threads(before)

    return pinned


def emit(event: Event) -> None:
    if _sink is not None:
        _sink(event)


def build_into(unit: UnitPlan, folder: Path, staging: Path, at: Callable[[str], None],
               log_file: Path | None) -> None:
    """Build `unit`'s program and its facts into `staging`. Library output goes to `log_file` (None: left
    where it is); a step that fails raises, its name given to `at` before it began."""
    with captured(log_file, f"{unit.label} program {unit.program_key[:12]}") as log_stream:
        facts = _build(unit, folder, staging, at, log_stream)
    (staging / FACTS_FILE).write_text(facts.model_dump_json(indent=2))


def record(unit: UnitPlan, folder: Path, staging: Path) -> None:
    """Build `unit`'s program again into `staging` with its ETRecord (program.etrecord), unverified: the
    caller compares the program's bytes with the cached program's, so that the ETRecord provably
    describes the program a bundle ships."""
    from deployc.targets.backends import BACKENDS

    BACKENDS[unit.backend].activate()
    _build_steps(unit, folder, staging, lambda _step: None, None, None, staging / ETRECORD_FILE)


def _build(unit: UnitPlan, folder: Path, staging: Path, at: Callable[[str], None], log: IO[str] | None) -> ProgramFacts:
    from deployc.graph.verify import start_verifier
    from deployc.targets.backends import BACKENDS

    BACKENDS[unit.backend].activate()  # before the verifier starts: it inherits what this sets up
    # Started now so that its imports overlap with the lowering below; it waits for its job on stdin.
    verifier = start_verifier() if unit.verify.run and not unit.verify.host_reference else None
    try:
        return _build_steps(unit, folder, staging, at, verifier, log)
    finally:
        if verifier is not None and verifier.poll() is None:
            verifier.kill()
            verifier.wait()


def _failing_point(model: Any, export: Export, point: dict[str, int], failure: Exception) -> BuildError:
    """Why the eager model fails at a verification point, in terms of the manifest's dims."""
    import torch

    from deployc.graph.dims import explain_failing_point
    from deployc.graph.export import export_model
    from deployc.graph.inputs import export_point, make_inputs

    def runs(at: dict[str, int]) -> bool:
        try:
            with torch.no_grad():
                model(*make_inputs(export.inputs, at, export.seed))
            return True
        except Exception:  # model code: any failure means the size does not work
            return False

    def export_at(at: dict[str, int]) -> Any:
        return export_model(model, make_inputs(export.inputs, at, export.seed), export.inputs, export.dims)

    return explain_failing_point(export.dims, export_point(export.dims), point, failure, runs, export_at)


def _flatten(value: Any) -> list[Any]:
    import torch.utils._pytree as pytree

    return list(pytree.tree_leaves(value))


@_one_thread
def _build_steps(unit: UnitPlan, folder: Path, staging: Path, at: Callable[[str], None],
                 verifier: subprocess.Popen[str] | None, log: IO[str] | None,
                 etrecord: Path | None = None) -> ProgramFacts:
    """etrecord: also write the program's ETRecord there (deployc build --etrecord)."""
    import torch

    from deployc.core.facts import Measurement
    from deployc.core.pte import method_facts
    from deployc.graph.export import MethodModule, export_model
    from deployc.graph.inputs import export_point, make_inputs
    from deployc.graph.lower import WEIGHTS_TAG, lower_program
    from deployc.graph.model import load_model
    from deployc.graph.quantize import (
        LAYERS,
        calibration_samples,
        input_ranks,
        looked_up_embeddings,
        pt2e_quantize,
        quantize_embeddings,
        share_tied_int4_tables,
        stayed_float,
        tied_embeddings,
        torchao_quantize,
    )
    from deployc.graph.verify import output_facts, verify, verify_reference
    from deployc.targets.backends import BACKENDS

    export, lower, recipe = unit.export, unit.lower, unit.quantize.recipe
    backend = BACKENDS[unit.backend]
    durations: dict[str, float] = {}
    clock = time.perf_counter()

    def lap(name: str) -> None:
        nonlocal clock
        now = time.perf_counter()
        durations[name] = round(now - clock, 3)
        clock = now

    at("load")
    model = load_model(unit.load, folder)
    backend.adapt_model(model, recipe)
    # forward first, then the further methods; each has its own inputs, all share the dims.
    signatures = [("forward", "forward", export.inputs)] + [(m.name, m.function, m.inputs) for m in export.methods]
    examples = {name: make_inputs(inputs, export_point(export.dims), export.seed) for name, _, inputs in signatures}
    checks: list[tuple[str, dict[str, int], list[Any]]] = []  # (method, dims, inputs) at every point
    first: list[bool] = []  # a point's first input: the bundle's self-test vectors
    verify_points = unit.verify.points
    for name, _, inputs in signatures:  # each round one input at every point, seeded apart
        for j in range(unit.verify.inputs):
            checks += [(name, p, make_inputs(inputs, p, export.seed + 1 + i + len(verify_points) * j))
                       for i, p in enumerate(verify_points)]
            first += [j == 0] * len(verify_points)
    functions = {name: getattr(model, function) for name, function, _ in signatures}
    references = []
    with torch.no_grad():
        for name, point, inp in checks:
            try:
                references.append([t.detach().clone() for t in _flatten(functions[name](*inp))])
            except Exception as exc:
                if name != "forward" or not export.dims:
                    raise
                at("export")  # what torch.export makes of the declared dims says why
                raise _failing_point(model, export, point, exc) from exc
    points = [(name, point, inp, ref) for (name, point, inp), ref, shipped in zip(checks, references, first) if shipped]
    task = _task_checks(unit, model, folder, checks, references)
    sequences: list[list[int]] = []
    texts: list[tuple[list[int], list[int]]] = []
    windows: list[list[tuple[str, dict[str, int], list[Any], list[Any], int]]] = []
    if unit.verify.generate:
        from deployc.graph.parity import generation_checks, scored, text_checks

        context = int(unit.lower.constants.get("max_seq_len", 0))
        for calls, refs in generation_checks(model, export, unit.verify.generate, context, export.seed):
            sequences.append(list(range(len(checks), len(checks) + len(calls))))
            checks += calls
            references += refs
        for calls, refs, targets in text_checks(model, export):
            windows.append([(m, p, inp, ref, t) for (m, p, inp), ref, t in zip(calls, refs, targets)])
            if export.static is not None:  # one call reads the window in prefill chunks (the emulator is slow)
                calls, refs = scored(calls, refs)
            texts.append((list(range(len(checks), len(checks) + len(calls))), targets))
            checks += calls
            references += refs
    samples = ((task.data.measure_spec(), [(*checks[i], references[i]) for i in task.checks])
               if task is not None else None)
    self_test_positions = self_test_vectors.write(staging / self_test_vectors.SELF_TEST_FILE, points, windows,
                                                  samples)
    lap("load")
    outputs = {name: output_facts([r for (m, _, _), r in zip(checks, references) if m == name])
               for name, _, _ in signatures}
    signature_facts = {name: Signature(inputs=[TensorFacts(name=i.name, dtype=i.dtype, shape=list(i.shape))
                                               for i in inputs], outputs=outputs[name])
                       for name, _, inputs in signatures}
    if backend.format == "tflite":
        if etrecord is not None:
            raise BuildError("an ETRecord is ExecuTorch's; a LiteRT program has none")
        return _convert_litert(unit, model, examples["forward"], checks, references, staging, at, lap, verifier,
                               log, durations, signature_facts, (sequences, texts, self_test_positions), task)

    if export.static is not None:
        return _build_static(unit, model, checks, references, staging, at, lap, verifier, log, durations,
                             signature_facts, (sequences, texts, self_test_positions), etrecord)

    at("quantize" if recipe.method == "torchao" else "export")
    if recipe.method == "torchao":
        # Only a data file shares bytes between the embedding kernel's table and XNNPACK's weights.
        tied = (tied_embeddings(model, recipe.group_size)
                if recipe.embedding_bits == 4 and recipe.group_size and unit.serialize.external_weights else [])
        model = torchao_quantize(model, backend.quantizer(recipe, lower.options), recipe.group_size,
                                 input_ranks(model, examples["forward"], torch.nn.Linear))
        if recipe.embedding_bits:
            share_tied_int4_tables(model, tied)
            group = recipe.group_size if recipe.embedding_bits == 4 else None
            quantize_embeddings(model, backend.embedding_quantizer(recipe), group,
                                looked_up_embeddings(model, examples["forward"]))
        lap("quantize")
        at("export")
    programs = {name: export_model(model if name == "forward" else MethodModule(model, function), examples[name],
                                   inputs, export.dims, by_name=name == "forward")
                for name, function, inputs in signatures}
    fault_point("export")
    lap("export")
    # torchao's schemes quantize linears only: a convolution stays float, said as PT2E's leftovers are.
    float_layers = stayed_float(programs["forward"].graph_module, LAYERS) if recipe.method == "torchao" else []
    fallback = None
    if recipe.method == "pt2e":  # single-method programs only (the manifest refuses the rest)
        at("quantize")
        programs["forward"], float_layers, fallback = pt2e_quantize(
            programs["forward"], backend.quantizer(recipe, lower.options), calibration_samples(recipe, export, folder),
            lambda m: export_model(m, examples["forward"], export.inputs, export.dims),
            _fallback_target(unit) if recipe.float_fallback else None)
        lap("quantize")

    at("lower")
    external = unit.serialize.external_weights
    graph, program, reference = lower_program(programs, lower, recipe, external, etrecord)
    methods = method_facts(program.executorch_program)
    lap("lower")
    at("serialize")
    pte = staging / PROGRAM_FILE
    pte.write_bytes(program.buffer)
    data = None
    if external:
        data = staging / PROGRAM_DATA_FILE
        with tempfile.TemporaryDirectory(dir=staging) as tmp:
            program.write_tensor_data_to_file(tmp)
            written = sorted(Path(tmp).iterdir())
            if [p.name for p in written] != [f"{WEIGHTS_TAG}.ptd"]:
                raise BuildError(f"external weights: expected one data file, ExecuTorch wrote "
                                 f"{[p.name for p in written] or 'none'}")
            written[0].replace(data)
    lap("serialize")

    if reference is not None and unit.verify.host_reference:
        at("verify")
        measurement = verify_reference(reference, checks, references, unit.verify.host_reference, task)
        lap("verify")
    elif verifier is not None:
        at("verify")
        measurement = verify(pte, checks, references, verifier, log, sequences, data, texts,
                             export.text.file if export.text else "", self_test_positions, task=task)
        lap("verify")
    else:
        measurement = Measurement(status="not-run", reason=unit.verify.reason)
    return ProgramFacts(
        program_key=unit.program_key, backend=unit.backend, quantization=unit.quantization,
        size_bytes=pte.stat().st_size, data_bytes=data.stat().st_size if data else 0, dims=export.dims,
        signatures=signature_facts, methods=methods, measurement=measurement, durations_s=durations,
        stayed_float=float_layers, float_fallback=fallback, **graph)


# Held-out samples the float fallback measures a static scheme on, spread over the verification points:
# drawn like the verification's inputs, from seeds neither the verification (seed + 1 to + 96) nor calibration
# uses. A tiny classifier's SQNR moves by 30 dB from one input to the next (PVT v2: 33.6 and 40.0 dB on
# two samples, 9.8 on the verification's), so the worst of several is what the search aims above. Sixteen,
# not eight: the worst of eight is too noisy an estimate of the tail (MobileNetV2's choice from eight built
# to 19.8 dB where plain int8 gives 20.8; from sixteen, built: MobileNetV2 20.8, Depth Anything 19.8 -> 22.8,
# SwiftFormer 14.5 -> 25.5, and no row regressed in a simulation of the 40 rows the fallback acts on).
FALLBACK_SAMPLES = 16
FALLBACK_SEED = 2000


def _fallback_target(unit: UnitPlan) -> tuple[Any, list[list[Any]]]:
    """The float fallback's target (the unit's tolerances; a decoder judged on text only: its scheme's) and
    its held-out samples."""
    from deployc.core.quantization import SCHEMES
    from deployc.graph.inputs import make_inputs
    from deployc.graph.sensitivity import Target

    v, export, scheme = unit.verify, unit.export, SCHEMES[unit.quantize.recipe.scheme]
    judged = v.min_sqnr_db > NOT_JUDGED_SQNR
    target = Target(min_cosine=v.min_cosine if judged else scheme.min_cosine,
                    min_sqnr_db=v.min_sqnr_db if judged else scheme.min_sqnr_db,
                    budget=unit.quantize.recipe.float_fallback or 0.0)
    per_point = -(-FALLBACK_SAMPLES // len(v.points))
    samples = [make_inputs(export.inputs, point, export.seed + FALLBACK_SEED + per_point * i + j)
               for i, point in enumerate(v.points) for j in range(per_point)]
    return target, samples


def _task_checks(unit: UnitPlan, model: Any, folder: Path, checks: list[Any], references: list[Any]
                 ) -> TaskChecks | None:
    """The manifest's task samples as further forward checks (appended, with eager's outputs), measured by
    the task measure rather than cosine."""
    import torch

    from deployc.graph.inputs import task_samples
    from deployc.graph.verify import TaskChecks

    data = unit.verify.data
    if data is None:
        return None
    start = len(checks)
    with torch.no_grad():
        for dims, inputs in task_samples(folder / data.file, data.sha256, unit.export.inputs):
            checks.append(("forward", dims, inputs))
            references.append([t.detach().clone() for t in _flatten(model(*inputs))])
    return TaskChecks(checks=list(range(start, len(checks))), data=data)


def _build_static(unit: UnitPlan, model: Any, checks: list[Any], references: list[Any], staging: Path,
                  at: Callable[[str], None], lap: Callable[[str], None], verifier: subprocess.Popen[str] | None,
                  log: IO[str] | None, durations: dict[str, float], signatures: dict[str, Signature],
                  judged: tuple[list[list[int]], list[tuple[list[int], list[int]]], int],
                  etrecord: Path | None = None) -> ProgramFacts:
    """A decoder in the static form (graph/static_decoder.py): its prefill and decode methods exported,
    quantized on text read through the driver, lowered; verified through the driver against the
    cached decoder's `forward` calls, like any decoder program."""
    import torch

    from deployc.core.facts import Measurement
    from deployc.core.pte import method_facts
    from deployc.graph.lower import lower_program
    from deployc.graph.quantize import pt2e_quantize
    from deployc.graph.static_decoder import calibration_calls, example_inputs, export_static, static_form
    from deployc.graph.verify import verify
    from deployc.targets.backends import BACKENDS

    export, lower, recipe = unit.export, unit.lower, unit.quantize.recipe
    assert export.static is not None
    at("export")
    static, shapes = static_form(model, export.static)
    programs = export_static(static, shapes)
    lap("export")
    if recipe.method == "pt2e":
        at("quantize")
        calls = calibration_calls(static, shapes, _calibration_text(unit, static.decoder.config.vocab_size))
        quantizer = BACKENDS[unit.backend].quantizer(recipe, lower.options)
        for name, chunk in ((shapes.prefill_method, shapes.chunk), (shapes.decode_method, 1)):
            programs[name], _, _ = pt2e_quantize(programs[name], quantizer, calls[name],
                                                 _exporter(example_inputs(static.decoder, shapes.context, chunk)))
        lap("quantize")
    at("lower")
    graph, program, _ = lower_program(programs, lower, recipe, etrecord=etrecord)
    methods = method_facts(program.executorch_program)
    lap("lower")
    at("serialize")
    pte = staging / PROGRAM_FILE
    pte.write_bytes(program.buffer)
    lap("serialize")
    sequences, texts, self_test_positions = judged
    if verifier is not None:
        at("verify")
        measurement = verify(pte, checks, references, verifier, log, sequences, None, texts,
                             export.text.file if export.text else "", self_test_positions, static=shapes)
        lap("verify")
    else:
        measurement = Measurement(status="not-run", reason=unit.verify.reason)
    for name, chunk in ((shapes.prefill_method, shapes.chunk), (shapes.decode_method, 1)):
        inputs = example_inputs(static.decoder, shapes.context, chunk)
        with torch.no_grad():
            outputs = static(*inputs)
        signatures[name] = Signature(inputs=_tensor_facts(shapes.input_names(), inputs),
                                     outputs=_tensor_facts(shapes.output_names(), outputs))
    return ProgramFacts(
        program_key=unit.program_key, backend=unit.backend, quantization=unit.quantization,
        size_bytes=pte.stat().st_size, dims=export.dims, signatures=signatures, methods=methods,
        measurement=measurement, durations_s=durations, static_decoder=shapes, **graph)


def _exporter(example: list[Any]) -> Callable[[Any], Any]:
    """Exports a quantized static method again at its own inputs."""
    from deployc.graph.export import export_model

    return lambda module: export_model(module, example, [], [], by_name=False)


def _tensor_facts(names: list[str], tensors: Any) -> list[TensorFacts]:
    return [TensorFacts(name=n, dtype=str(t.dtype).removeprefix("torch."), shape=list(t.shape))
            for n, t in zip(names, tensors)]


def _calibration_text(unit: UnitPlan, vocab: int) -> list[list[int]]:
    """Token sequences a static decoder is calibrated on: the held-out text's windows and prompts, or (a
    decoder without a tokenizer) seeded random ids, as many as the recipe's samples."""
    text = unit.export.text
    if text is not None:
        return [*text.windows, *text.prompts]
    recipe, form = unit.quantize.recipe, unit.export.static
    assert form is not None
    import torch

    g = torch.Generator().manual_seed(recipe.calibration_seed or 0)
    length = min(form.context, 2 * form.prefill + 8)
    return [torch.randint(0, vocab, (length,), generator=g).tolist() for _ in range(recipe.calibration_samples or 1)]


def _convert_litert(unit: UnitPlan, model: Any, example: list[Any], checks: list[Any], references: list[Any],
                    staging: Path, at: Callable[[str], None], lap: Callable[[str], None],
                    verifier: subprocess.Popen[str] | None, log: IO[str] | None, durations: dict[str, float],
                    signatures: dict[str, Signature],
                    decoding: tuple[list[list[int]], list[tuple[list[int], list[int]]], int],
                    task: TaskChecks | None) -> ProgramFacts:
    """The LiteRT path: litert-torch converts (and quantizes) the eager model into a .tflite, which the
    verifier runs through the LiteRT interpreter against the same references."""
    from deployc.core.facts import Measurement, program_file
    from deployc.core.pte import MethodFacts
    from deployc.core.tflite import operators
    from deployc.graph.verify import verify
    from deployc.targets.backends import BACKENDS

    backend = BACKENDS[unit.backend]
    at("lower")
    edge = backend.convert(model, example, unit.quantize.recipe)
    lap("lower")
    at("serialize")
    tflite = staging / program_file("tflite")
    edge.export(str(tflite))
    lap("serialize")
    ops = operators(tflite)
    if verifier is not None:
        at("verify")
        sequences, texts, self_test_positions = decoding  # a decoder's calls, judged as the .pte path does
        measurement = verify(tflite, checks, references, verifier, log, sequences, None, texts,
                             unit.export.text.file if unit.export.text else "", self_test_positions, task=task)
        lap("verify")
    else:
        measurement = Measurement(status="not-run", reason=unit.verify.reason)
    forward = signatures["forward"]
    return ProgramFacts(
        program_key=unit.program_key, backend=unit.backend, quantization=unit.quantization, format="tflite",
        size_bytes=tflite.stat().st_size, dims=unit.export.dims, signatures=signatures,
        methods={"forward": MethodFacts(planned_memory_bytes=0, operators=ops, delegates=[],
                                        inputs=len(forward.inputs), outputs=len(forward.outputs))},
        measurement=measurement, durations_s=durations, delegates={}, delegated_ops=0, total_ops=0,
        delegated_share=0.0, non_delegated_ops=[])

