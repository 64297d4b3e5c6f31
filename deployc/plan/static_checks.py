"""What verifying a decoder in the static form costs, in calls of each method and, on an emulator, in seconds:
the plan shows it before anything is built, because on the HTP emulator every call takes seconds
(SmolLM2-135M: 12-15 s, one token or 32), and fits the greedy prompts it judges within a budget. The calls
are those the verification makes (graph/worker.py, graph/verify_worker.py) read through the driver's own
arithmetic (`pieces`); the build reports each method's calls and seconds, measured."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

from deployc.core.static_decoder import driver_calls
from deployc.plan.build_plan import Export, StaticForm, UnitPlan, Verify
from deployc.plan.heldout import seeded_prompt_lengths

# The HTP emulator's seconds a call, per weight of the model: a call's cost follows the weights it reads, hardly
# its tokens. Measured 2026-12-06 on this project's 2-core host, SmolLM2-135M-Instruct (134.5M weights) in
# 16a8w: 12.0 s a decode call, 13.7 s a 32-token prefill call (two methods), 15.3 s a 32-token call (one graph).
EMULATOR_SECONDS_PER_WEIGHT = 15.3 / 134.5e6
DEFAULT_BUDGET_S = 300.0  # a static decoder's verification on the emulator, by the estimate


@dataclass(frozen=True)
class Judged:
    """What a static decoder's verification reads: each call's tokens, through the driver."""

    form: StaticForm
    points: Sequence[int]  # the verification points' lengths, each input
    prompts: Sequence[int]  # the greedy prompts' lengths
    generate: int
    windows: Sequence[int]  # the held-out windows' scored positions

    def calls(self) -> dict[str, int]:
        one_graph = self.form.decode == "prefill"
        # With a prefix token every read starts with it (points, prompts and windows alike): the driver answers
        # position 0 from the build's float rows, and the program reads the rest.
        first = int(self.form.prefix_token is not None)
        reads = [p - first for p in self.points]
        for length in self.prompts:  # the prompt, then each token eager chose: in chunks (one graph), else a call each
            reads += ([length + self.generate - 1 - first] if one_graph
                      else [length - first] + [1] * (self.generate - 1))
        reads += [w - first for w in self.windows]
        return driver_calls(reads, self.form.prefill, not one_graph)


def judged(export: Export, v: Verify, context: int) -> Judged | None:
    """What a unit's verification reads; None when the unit is not a static decoder or is not run."""
    form = export.static
    if form is None or not v.run:
        return None
    text, prompts, windows = export.text, [], []
    if v.generate:
        seq = next(d for d in export.dims if d.name == "seq")
        prompts = ([len(p) for p in text.prompts] if text is not None
                   else seeded_prompt_lengths(seq.min, seq.max, context, v.generate, v.prompts))
        windows = [len(w) - 1 for w in text.windows] if text is not None else []
    return Judged(form, [point.get("seq", 1) for point in v.points] * v.inputs, prompts, v.generate, windows)


def verification_calls(unit: UnitPlan) -> dict[str, int]:
    """Calls per method of the unit's verification; {} when the unit is not a static decoder or is not run."""
    j = judged(unit.export, unit.verify, int(unit.lower.constants.get("max_seq_len", 0)))
    return j.calls() if j is not None else {}


def estimate_s(calls: dict[str, int], weights: int) -> float:
    """The emulator's seconds for `calls` of a model of `weights` weights, by the measured rate."""
    return sum(calls.values()) * weights * EMULATOR_SECONDS_PER_WEIGHT


def fitting_prompts(j: Judged, weights: int, budget_s: float) -> int:
    """How many of the judged prompts (the first ones; at least 1) the verification can read within the budget.
    The points and the held-out windows are always read: they are the figures the unit is gated on."""
    for n in range(len(j.prompts), 1, -1):
        if estimate_s(dataclasses.replace(j, prompts=j.prompts[:n]).calls(), weights) <= budget_s:
            return n
    return min(1, len(j.prompts))

