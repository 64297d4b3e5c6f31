"""What a built program is, as measured by the worker that built it: sizes, signatures, delegation,
operators, and its agreement with eager PyTorch. Stored beside the .pte in the cache (facts.json);
the driver judges it, packaging describes it in the runtime config, views show it."""

from __future__ import annotations

from typing import Literal

from deployc.core.dims import DimPlan
from deployc.core.pte import MethodFacts
from deployc.core.records import Frozen
from deployc.core.static_decoder import StaticDecoderLayout

FACTS_SCHEMA_VERSION = 1
FACTS_FILE = "facts.json"
PROGRAM_FILE = "program.pte"
ETRECORD_FILE = "program.etrecord"  # ExecuTorch's debug record of a program (deployc build --etrecord)
PROGRAM_DATA_FILE = "program.ptd"  # its external weights, when the plan keeps them outside the .pte


def program_file(fmt: str = "pte") -> str:
    """The program's name in a cache entry: program.pte, or program.tflite for LiteRT."""
    return PROGRAM_FILE if fmt == "pte" else f"program.{fmt}"


class SizeRange(Frozen):
    """An output size that varies with the inputs' dims."""

    min: int
    max: int


class TensorFacts(Frozen):
    name: str
    dtype: str
    shape: list[int | str | SizeRange]  # a size, a dim's name (inputs), or a range (outputs)


class Signature(Frozen):
    inputs: list[TensorFacts]
    outputs: list[TensorFacts]


class Metrics(Frozen):
    max_abs: float
    cosine: float
    sqnr_db: float


class Summary(Frozen):
    """The worst value of each metric over every output at every point."""

    max_abs: float
    min_cosine: float
    min_sqnr_db: float


class PointMetrics(Frozen):
    method: str
    dims: dict[str, int]
    outputs: list[Metrics]


class TokenParity(Frozen):
    """Greedy generation from fixed prompts, program against eager."""

    prompts: int
    generated: int  # tokens per prompt
    matched: int  # leading tokens equal to eager's, on the worst prompt
    identical: int = 0  # prompts whose every generated token is eager's


# How far (nats of log-probability) eager's most likely next token must lead its second for top-1 agreement
# to count at that position: a lead of 0.1 is a 10.5% higher probability. A placeholder model's nearly flat
# logits (perplexity near its vocabulary size) have leads of hundredths; a real model's few near-ties too.
TOP1_MARGIN = 0.1


class TextMetrics(Frozen):
    """A text-generation program on held-out text, every position against eager fp32's logits."""

    file: str  # the held-out text
    positions: int
    perplexity: float  # the program's, exp(mean negative log-likelihood of the text's next tokens)
    reference_perplexity: float  # eager fp32's on the same positions
    kl: float  # mean KL(eager || program) of the next-token distributions, nats
    top1: float  # share of the clear positions (below) where both pick the same most likely token
    # Positions where eager's first choice leads its second by TOP1_MARGIN nats or more: where top-1 agreement
    # means something (a near-tie flips on any rounding). None: a record from before the margin existed.
    top1_positions: int | None = None

    @property
    def perplexity_ratio(self) -> float:
        return self.perplexity / self.reference_perplexity


class TaskMetrics(Frozen):
    """A program on the manifest's task samples (`verify.data`), against eager fp32 on the same samples."""

    file: str
    samples: int
    measure: Literal["top1", "topk"]
    top1: float | None = None  # classifiers: share of samples whose top class is eager's
    k: int | None = None  # embedders: neighbours compared per sample (topk, at most samples - 1)
    topk_overlap: float | None = None  # mean share of each sample's k nearest others that both find
    mean_rank_change: float | None = None  # mean |rank moved| of eager's k nearest, in the program's order


class MethodCalls(Frozen):
    """A static decoder's method as its verification called it: how many calls, their seconds on this host
    (for the NPU: the HTP emulator's, not a phone's)."""

    calls: int
    seconds: float

    @property
    def per_call_s(self) -> float:
        return self.seconds / self.calls if self.calls else 0.0


class Measurement(Frozen):
    status: Literal["measured", "error", "not-run"]
    reason: str = ""
    points: list[PointMetrics] = []
    summary: Summary | None = None
    tokens: TokenParity | None = None  # text-generation programs
    text: TextMetrics | None = None  # text-generation programs with a held-out text
    self_test_text: TextMetrics | None = None  # the same over the positions the self-test vectors carry
    task: TaskMetrics | None = None  # with `verify.data`: the task measure
    latency_ms: float | None = None  # median of the middle point's forward on this host (a static decoder: one token)
    load_s: float | None = None
    method_calls: dict[str, MethodCalls] = {}  # a static decoder's methods, as the verification called them
    ran_on: str = ""  # what computed the outputs when it was not the program in the runtime (Verify.host_reference)


class FloatFallback(Frozen):
    """A static scheme's float fallback (quantization.float_fallback): the simulated int8 model's worst SQNR
    against the float one on held-out samples, and the operators left float to meet the tolerance."""

    budget: float  # the share of quantized operators it could leave float
    quantized: int  # operators with int8 inputs
    int8_sqnr_db: float  # every one of them int8
    kept_sqnr_db: float  # with left_float float (= int8_sqnr_db when nothing is)
    left_float: list[str] = []  # `module path (op)`, in graph order


class ProgramFacts(Frozen):
    schema_version: int = FACTS_SCHEMA_VERSION
    program_key: str
    backend: str
    quantization: str
    format: Literal["pte", "tflite"] = "pte"
    size_bytes: int
    data_bytes: int = 0  # the .ptd beside it (weights: external)
    dims: list[DimPlan]
    signatures: dict[str, Signature]  # the exported methods (constant methods have none)
    methods: dict[str, MethodFacts]  # every method of the program, constant methods included
    delegates: dict[str, int]  # backend id -> delegate blobs
    delegated_ops: int
    total_ops: int
    delegated_share: float
    non_delegated_ops: list[str]
    float_ops: list[str] = []  # of those, the ones computing in floating point (not a (de)quantize)
    scratch_bytes: int = 0  # kernels' scratch buffers (CMSIS-NN), inside the planned arena
    measurement: Measurement
    durations_s: dict[str, float]
    stayed_float: list[str] = []  # weighted layers left in floating point (torchao schemes: every convolution)
    float_fallback: FloatFallback | None = None  # a static scheme's measured fallback (None: not enabled)
    static_decoder: StaticDecoderLayout | None = None  # a decoder in the static form: how an app drives it

    @property
    def planned_memory_bytes(self) -> int:
        """The largest arena any one method needs."""
        return max((m.planned_memory_bytes for m in self.methods.values()), default=0)
