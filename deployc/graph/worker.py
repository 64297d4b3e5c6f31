"""Build one program of a plan, end to end, into a folder. Runs inside a worker process.

A build is a list of steps over one record (`Build`: what each step reads and what it leaves). Every form of
program (an ExecuTorch program, a decoder in the static form, a LiteRT program) starts with the same two
steps (load; eager's reference calls and the self-test vectors), takes its own steps to a serialized
program (`FORMS`), and ends with the same tail (verify, facts). A verification that missed its tolerance is
a fact, not a failure (rebuilding would give the same bytes); a step that raises fails the program. Library
output (torchao, torch, the runtime's C++ logging) goes to the unit's log file, not the user's terminal.
build/program_job.py puts what this makes into the cache.
"""

from __future__ import annotations

import functools
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Literal, ParamSpec, TypeVar

from deployc.core import self_test_vectors
from deployc.core.errors import BuildError
from deployc.core.events import Event, EventSink
from deployc.core.facts import (
    ETRECORD_FILE,
    FACTS_FILE,
    PROGRAM_DATA_FILE,
    PROGRAM_FILE,
    FloatFallback,
    Measurement,
    ProgramFacts,
    Signature,
    TensorFacts,
)
from deployc.core.faults import fault_point
from deployc.core.library_output import captured
from deployc.core.pte import MethodFacts
from deployc.core.static_decoder import StaticDecoderLayout
from deployc.plan.build_plan import NOT_JUDGED_SQNR, Export, InputPlan, UnitPlan

if TYPE_CHECKING:
    from deployc.graph.verify import Calls, TaskChecks

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


@dataclass
class Build:
    """What the steps of one program's build read and leave, in the order they leave it."""

    unit: UnitPlan
    folder: Path  # the manifest's: model code, checkpoints, calibration data
    staging: Path  # where the program and its files are written
    at: Callable[[str], None]  # told each step's name before it runs
    verifier: subprocess.Popen[str] | None = None  # the runtime's process, waiting for its job (None: not run)
    log: IO[str] | None = None
    etrecord: Path | None = None  # also write the program's ETRecord there (deployc build --etrecord)
    durations: dict[str, float] = field(default_factory=dict)
    clock: float = field(default_factory=time.perf_counter)
    # load, reference_calls:
    model: Any = None
    examples: dict[str, list[Any]] = field(default_factory=dict)  # per method: the inputs it is exported at
    calls: Calls | None = None
    signatures: dict[str, Signature] = field(default_factory=dict)
    # the form's steps:
    programs: dict[str, Any] = field(default_factory=dict)  # per method: the exported (and quantized) program
    external: bool = False  # the weights go to a data file beside the program
    float_layers: list[str] = field(default_factory=list)
    fallback: FloatFallback | None = None
    static: Any = None  # a decoder's static form (the module) ...
    shapes: StaticDecoderLayout | None = None  # ... and how an app drives it
    prefix: dict[str, Any] = field(default_factory=dict)  # ... its first token's rows in float (constant methods)
    executorch: Any = None  # ExecuTorch's program manager
    reference: Any = None  # the lowered forward on the backend's reference kernels, where this host verifies so
    graph: dict[str, Any] = field(default_factory=dict)  # delegation facts of the lowered graphs
    methods: dict[str, MethodFacts] = field(default_factory=dict)
    format: Literal["pte", "tflite"] = "pte"
    program: Path | None = None
    data: Path | None = None
    measurement: Measurement | None = None

    def lap(self, name: str) -> None:
        now = time.perf_counter()
        self.durations[name] = round(now - self.clock, 3)
        self.clock = now

    @property
    def judged(self) -> Calls:
        assert self.calls is not None, "reference_calls runs before any step that reads the calls"
        return self.calls

    @property
    def written(self) -> Path:
        assert self.program is not None, "a form's steps write the program before the tail reads it"
        return self.program


def build_into(unit: UnitPlan, folder: Path, staging: Path, at: Callable[[str], None],
               log_file: Path | None) -> None:
    """Build `unit`'s program and its facts into `staging`. Library output goes to `log_file` (None: left
    where it is); a step that fails raises, its name given to `at` before it began."""
    from deployc.graph.verify import start_verifier
    from deployc.targets.backends import BACKENDS

    with captured(log_file, f"{unit.label} program {unit.program_key[:12]}") as log_stream:
        BACKENDS[unit.backend].activate()  # before the verifier starts: it inherits what this sets up
        # Started now so that its imports overlap with the lowering below; it waits for its job on stdin.
        verifier = (start_verifier(BACKENDS[unit.backend].host_niceness)
                    if unit.verify.run and not unit.verify.host_reference else None)
        try:
            facts = run(Build(unit, folder, staging, at, verifier, log_stream))
        finally:
            if verifier is not None and verifier.poll() is None:
                verifier.kill()
                verifier.wait()
    (staging / FACTS_FILE).write_text(facts.model_dump_json(indent=2))


def record(unit: UnitPlan, folder: Path, staging: Path) -> None:
    """Build `unit`'s program again into `staging` with its ETRecord (program.etrecord), unverified: the
    caller compares the program's bytes with the cached program's, so that the ETRecord provably
    describes the program a bundle ships."""
    from deployc.targets.backends import BACKENDS

    BACKENDS[unit.backend].activate()
    run(Build(unit, folder, staging, lambda _step: None, etrecord=staging / ETRECORD_FILE))


Step = Callable[[Build], None]


@_one_thread
def run(b: Build) -> ProgramFacts:
    """The evaluator: the shared head, the form's steps, the shared tail; then the program's facts."""
    for step in (load, reference_calls, *FORMS[form(b.unit)], verify_program):
        step(b)
    return facts(b)


def form(unit: UnitPlan) -> str:
    from deployc.targets.backends import BACKENDS

    if BACKENDS[unit.backend].format == "tflite":
        return "litert"
    return "static" if unit.export.static is not None else "executorch"


# ---- the head: every form ---------------------------------------------------------------------------------
def load(b: Build) -> None:
    from deployc.graph.model import load_model
    from deployc.targets.backends import BACKENDS

    b.at("load")
    b.model = load_model(b.unit.load, b.folder)
    BACKENDS[b.unit.backend].adapt_model(b.model, b.unit.quantize.recipe)


def _methods(export: Export) -> list[tuple[str, str, list[InputPlan]]]:
    """(name, the model's function, inputs): forward first, then the further methods; all share the dims."""
    return [("forward", "forward", export.inputs)] + [(m.name, m.function, m.inputs) for m in export.methods]


def reference_calls(b: Build) -> None:
    """Eager's outputs on every verification input, task sample, prompt and held-out window; the self-test
    vectors the bundle ships; each method's signature."""
    from deployc.graph.inputs import export_point, make_inputs
    from deployc.graph.verify import Calls, output_facts

    export, methods = b.unit.export, _methods(b.unit.export)
    b.examples = {name: make_inputs(inputs, export_point(export.dims), export.seed) for name, _, inputs in methods}
    checks, first = _verification_inputs(b.unit, methods)
    references = _eager_outputs(b, methods, checks)
    points = [(name, point, inp, ref) for (name, point, inp), ref, shipped in zip(checks, references, first) if shipped]
    calls = Calls(checks, references, task=_task_checks(b.unit, b.model, b.folder, checks, references),
                  text_file=export.text.file if export.text else "")
    windows = _text_calls(b, calls) if b.unit.verify.generate else []
    samples = ((calls.task.data.measure_spec(), [(*checks[i], references[i]) for i in calls.task.checks])
               if calls.task is not None else None)
    calls.self_test_positions = self_test_vectors.write(b.staging / self_test_vectors.SELF_TEST_FILE, points,
                                                        windows, samples)
    b.calls = calls
    b.lap("load")
    outputs = {name: output_facts([r for (m, _, _), r in zip(checks, references) if m == name])
               for name, _, _ in methods}
    b.signatures = {name: Signature(inputs=[TensorFacts(name=i.name, dtype=i.dtype, shape=list(i.shape))
                                            for i in inputs], outputs=outputs[name])
                    for name, _, inputs in methods}


def _verification_inputs(unit: UnitPlan, methods: list[tuple[str, str, list[InputPlan]]]
                         ) -> tuple[list[tuple[str, dict[str, int], list[Any]]], list[bool]]:
    """(method, dims, inputs) at every point, each round one input at every point, seeded apart; and which
    are a point's first input (the bundle's self-test vectors)."""
    from deployc.graph.inputs import make_inputs
    from deployc.graph.static_decoder import starting_with_prefix

    checks: list[tuple[str, dict[str, int], list[Any]]] = []
    first: list[bool] = []
    points, seed, form = unit.verify.points, unit.export.seed, unit.export.static
    for name, _, inputs in methods:
        for j in range(unit.verify.inputs):
            checks += [(name, p, starting_with_prefix(make_inputs(inputs, p, seed + 1 + i + len(points) * j), form))
                       for i, p in enumerate(points)]
            first += [j == 0] * len(points)
    return checks, first


def _eager_outputs(b: Build, methods: list[tuple[str, str, list[InputPlan]]],
                   checks: list[tuple[str, dict[str, int], list[Any]]]) -> list[list[Any]]:
    import torch

    functions = {name: getattr(b.model, function) for name, function, _ in methods}
    references = []
    with torch.no_grad():
        for name, point, inp in checks:
            try:
                references.append([t.detach().clone() for t in _flatten(functions[name](*inp))])
            except Exception as exc:
                if name != "forward" or not b.unit.export.dims:
                    raise
                b.at("export")  # what torch.export makes of the declared dims says why
                raise _failing_point(b.model, b.unit.export, point, exc) from exc
    return references


def _text_calls(b: Build, calls: Calls) -> list[list[tuple[str, dict[str, int], list[Any], list[Any], int]]]:
    """A decoder's greedy generation from each prompt and its calls on the held-out text, appended to `calls`;
    returns the held-out windows as the self-test vectors carry them."""
    from deployc.graph.parity import generation_checks, scored, text_checks

    export = b.unit.export
    windows = []
    context = int(b.unit.lower.constants.get("max_seq_len", 0))
    one_graph = export.static is not None and export.static.decode == "prefill"
    for more, refs in generation_checks(b.model, export, b.unit.verify.generate, context, export.seed,
                                        b.unit.verify.prompts):
        if one_graph:  # the same tokens fed in prefill chunks: its one graph, a call per chunk
            more, refs = scored(more, refs)
        calls.sequences.append(list(range(len(calls.checks), len(calls.checks) + len(more))))
        calls.checks += more
        calls.references += refs
    for more, refs, targets in text_checks(b.model, export):
        windows.append([(m, p, inp, ref, t) for (m, p, inp), ref, t in zip(more, refs, targets)])
        if export.static is not None:  # one call reads the window in prefill chunks (the emulator is slow)
            more, refs = scored(more, refs)
        calls.texts.append((list(range(len(calls.checks), len(calls.checks) + len(more))), targets))
        calls.checks += more
        calls.references += refs
    return windows


# ---- an ExecuTorch program ---------------------------------------------------------------------------------
def quantize_weights(b: Build) -> None:
    """torchao's schemes quantize the eager model's linears (and embedding tables) before export; the gguf
    scheme keeps a GGUF file's blocks."""
    import torch

    from deployc.graph.quantize import (
        input_ranks,
        looked_up_embeddings,
        quantize_embeddings,
        share_tied_int4_tables,
        tied_embeddings,
        torchao_quantize,
    )
    from deployc.targets.backends import BACKENDS

    recipe, backend = b.unit.quantize.recipe, BACKENDS[b.unit.backend]
    if recipe.method == "blocks":
        from deployc.graph.gguf_blocks import keep_blocks

        b.at("quantize")
        # gguf-8da: the activations' int8 image alone (no residual row); a float checkpoint: rounded as llama.cpp does
        keep_blocks(b.model, residual=recipe.scheme == "gguf", round_float=b.unit.load.gguf is None)
        b.lap("quantize")
        return
    if recipe.method != "torchao":
        return
    b.at("quantize")
    # Only a data file shares bytes between the embedding kernel's table and XNNPACK's weights.
    tied = (tied_embeddings(b.model, recipe.group_size)
            if recipe.embedding_bits == 4 and recipe.group_size and b.unit.serialize.external_weights else [])
    b.model = torchao_quantize(b.model, backend.quantizer(recipe, b.unit.lower.options), recipe.group_size,
                               input_ranks(b.model, b.examples["forward"], torch.nn.Linear))
    if recipe.embedding_bits:
        share_tied_int4_tables(b.model, tied)
        group = recipe.group_size if recipe.embedding_bits == 4 else None
        quantize_embeddings(b.model, backend.embedding_quantizer(recipe), group,
                            looked_up_embeddings(b.model, b.examples["forward"]))
    b.lap("quantize")


def export(b: Build) -> None:
    from deployc.graph.export import MethodModule, export_model
    from deployc.graph.quantize import LAYERS, stayed_float

    export = b.unit.export
    b.at("export")
    b.programs = {name: export_model(b.model if name == "forward" else MethodModule(b.model, function),
                                     b.examples[name], inputs, export.dims, by_name=name == "forward")
                  for name, function, inputs in _methods(export)}
    fault_point("export")
    b.lap("export")
    b.external = b.unit.serialize.external_weights
    if b.unit.quantize.recipe.method == "torchao":  # linears only: a convolution stays float, said as PT2E's are
        b.float_layers = stayed_float(b.programs["forward"].graph_module, LAYERS)


def quantize_activations(b: Build) -> None:
    """PT2E's schemes quantize the exported forward, calibrated (single-method programs: the manifest refuses
    the rest), with the float fallback where the recipe allows one."""
    from deployc.graph.export import export_model
    from deployc.graph.quantize import calibration_samples, pt2e_quantize
    from deployc.targets.backends import BACKENDS

    recipe, export = b.unit.quantize.recipe, b.unit.export
    if recipe.method != "pt2e":
        return
    b.at("quantize")
    b.programs["forward"], b.float_layers, b.fallback = pt2e_quantize(
        b.programs["forward"], BACKENDS[b.unit.backend].quantizer(recipe, b.unit.lower.options),
        calibration_samples(recipe, export, b.folder, b.unit.quantize.text),
        lambda m: export_model(m, b.examples["forward"], export.inputs, export.dims),
        _fallback_target(b.unit) if recipe.float_fallback else None)
    b.lap("quantize")


def lower(b: Build) -> None:
    from deployc.core.pte import method_facts
    from deployc.graph.lower import lower_program

    b.at("lower")
    step = b.unit.lower
    if b.prefix:  # the build's own constant methods beside the manifest's
        step = step.model_copy(update={"constants": {**step.constants, **{k.removeprefix("get_"): v
                                                                          for k, v in b.prefix.items()}}})
    b.graph, b.executorch, b.reference = lower_program(b.programs, step, b.unit.quantize.recipe, b.external,
                                                       b.etrecord, plan_inputs=b.shapes is None)
    b.methods = method_facts(b.executorch.executorch_program)
    b.lap("lower")


def serialize(b: Build) -> None:
    from deployc.graph.lower import WEIGHTS_TAG

    b.at("serialize")
    b.program = b.staging / PROGRAM_FILE
    b.program.write_bytes(b.executorch.buffer)
    if b.external:
        b.data = b.staging / PROGRAM_DATA_FILE
        with tempfile.TemporaryDirectory(dir=b.staging) as tmp:
            b.executorch.write_tensor_data_to_file(tmp)
            written = sorted(Path(tmp).iterdir())
            if [p.name for p in written] != [f"{WEIGHTS_TAG}.ptd"]:
                raise BuildError(f"external weights: expected one data file, ExecuTorch wrote "
                                 f"{[p.name for p in written] or 'none'}")
            written[0].replace(b.data)
    b.lap("serialize")


# ---- a decoder in the static form (graph/static_decoder.py) ---------------------------------------------
def export_static_form(b: Build) -> None:
    """The decoder's prefill and decode methods (or its one method), KV caches in and out."""
    from deployc.graph.static_decoder import export_static, prefix_rows, static_form

    assert b.unit.export.static is not None
    b.at("export")
    b.static, b.shapes = static_form(b.model, b.unit.export.static)
    b.programs = export_static(b.static, b.shapes)
    if b.shapes.prefix_token >= 0:
        b.prefix = prefix_rows(b.static, b.shapes)
    b.lap("export")


def quantize_static_form(b: Build) -> None:
    """Each method quantized on text read through the driver, as an app calls it."""
    from deployc.graph.quantize import pt2e_quantize
    from deployc.graph.static_decoder import calibration_calls, example_inputs
    from deployc.targets.backends import BACKENDS

    recipe, shapes = b.unit.quantize.recipe, b.shapes
    if recipe.method != "pt2e" or shapes is None:
        return
    b.at("quantize")
    calls = calibration_calls(b.static, shapes, _calibration_text(b.unit, b.static.decoder.config.vocab_size),
                              b.prefix or None)
    quantizer = BACKENDS[b.unit.backend].quantizer(recipe, b.unit.lower.options)
    for name, chunk in shapes.methods():
        b.programs[name], _, _ = pt2e_quantize(b.programs[name], quantizer, calls[name],
                                               _exporter(example_inputs(b.static.decoder, shapes.context, chunk)))
    b.lap("quantize")


def static_signatures(b: Build) -> None:
    """The methods' signatures, from one eager call of each."""
    import torch

    from deployc.graph.static_decoder import example_inputs

    shapes = b.shapes
    assert shapes is not None
    for name, chunk in shapes.methods():
        inputs = example_inputs(b.static.decoder, shapes.context, chunk)
        with torch.no_grad():
            outputs = b.static(*inputs)
        b.signatures[name] = Signature(inputs=_tensor_facts(shapes.input_names(), inputs),
                                       outputs=_tensor_facts(shapes.output_names(), outputs))


# ---- a LiteRT program --------------------------------------------------------------------------------------
def convert(b: Build) -> None:
    """litert-torch converts (and quantizes) the eager model into a .tflite, which the verifier runs through
    the LiteRT interpreter against the same references."""
    from deployc.core.facts import program_file
    from deployc.core.tflite import operators
    from deployc.targets.backends import BACKENDS

    if b.etrecord is not None:
        raise BuildError("an ETRecord is ExecuTorch's; a LiteRT program has none")
    b.at("lower")
    edge = BACKENDS[b.unit.backend].convert(b.model, b.examples["forward"], b.unit.quantize.recipe)
    b.lap("lower")
    b.at("serialize")
    b.format, b.program = "tflite", b.staging / program_file("tflite")
    edge.export(str(b.program))
    b.lap("serialize")
    forward = b.signatures["forward"]
    b.methods = {"forward": MethodFacts(planned_memory_bytes=0, operators=operators(b.program), delegates=[],
                                        inputs=len(forward.inputs), outputs=len(forward.outputs))}
    b.graph = {"delegates": {}, "delegated_ops": 0, "total_ops": 0, "delegated_share": 0.0, "non_delegated_ops": []}


FORMS: dict[str, tuple[Step, ...]] = {
    "executorch": (quantize_weights, export, quantize_activations, lower, serialize),
    "static": (export_static_form, quantize_static_form, lower, serialize, static_signatures),
    "litert": (convert,),
}


# ---- the tail: every form ---------------------------------------------------------------------------------
def verify_program(b: Build) -> None:
    """On the backend's reference kernels in this process, in this host's runtime, or not run (and why)."""
    from deployc.graph.verify import verify, verify_reference

    host_reference = b.unit.verify.host_reference
    if b.reference is not None and host_reference:
        b.at("verify")
        b.measurement = verify_reference(b.reference, b.judged, host_reference)
        b.lap("verify")
    elif b.verifier is not None:
        b.at("verify")
        b.measurement = verify(b.written, b.judged, b.verifier, b.log, b.data, b.shapes)
        b.lap("verify")
    else:
        b.measurement = Measurement(status="not-run", reason=b.unit.verify.reason)


def facts(b: Build) -> ProgramFacts:
    unit = b.unit
    assert b.measurement is not None
    return ProgramFacts(
        program_key=unit.program_key, backend=unit.backend, quantization=unit.quantization, format=b.format,
        size_bytes=b.written.stat().st_size, data_bytes=b.data.stat().st_size if b.data else 0,
        dims=unit.export.dims, signatures=b.signatures, methods=b.methods, measurement=b.measurement,
        durations_s=b.durations, stayed_float=b.float_layers, float_fallback=b.fallback, static_decoder=b.shapes,
        **b.graph)


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


def _exporter(example: list[Any]) -> Callable[[Any], Any]:
    """Exports a quantized static method again at its own inputs."""
    from deployc.graph.export import export_model

    return lambda module: export_model(module, example, [], [], by_name=False)


def _tensor_facts(names: list[str], tensors: Any) -> list[TensorFacts]:
    return [TensorFacts(name=n, dtype=str(t.dtype).removeprefix("torch."), shape=list(t.shape))
            for n, t in zip(names, tensors)]


def _calibration_text(unit: UnitPlan, vocab: int) -> list[list[int]]:
    """Token sequences a static decoder is calibrated on: its calibration text's (never the held-out text it is
    judged on), or (a decoder without a tokenizer) seeded random ids, as many as the recipe's samples."""
    if unit.quantize.text is not None:
        return unit.quantize.text.sequences
    recipe, form = unit.quantize.recipe, unit.export.static
    assert form is not None
    import torch

    g = torch.Generator().manual_seed(recipe.calibration_seed or 0)
    length = min(form.context, 2 * form.prefill + 8)
    sequences = [torch.randint(0, vocab, (length,), generator=g).tolist()
                 for _ in range(recipe.calibration_samples or 1)]
    # Each from the prefix token where the form has one, as its driver takes sequences.
    return [[form.prefix_token, *s[1:]] for s in sequences] if form.prefix_token is not None else sequences
