"""What verifying a decoder in the static form costs, in calls of each method: the plan shows it before
anything is built, because on the HTP emulator every call takes seconds (SmolLM2-135M: 12-14 s, one token or
32), and the verification's report gives the seconds each call took. The calls are those the verification
makes (graph/worker.py, graph/verify_worker.py) read through the driver's own arithmetic (`pieces`)."""

from __future__ import annotations

from deployc.core.static_decoder import driver_calls
from deployc.plan.build_plan import UnitPlan
from deployc.plan.heldout import seeded_prompt_lengths

TIMED_CALLS = 2  # the host-latency figure of a static decoder: a warm-up and one timed call of its first point


def verification_calls(unit: UnitPlan) -> dict[str, int]:
    """Calls per method of the unit's verification; {} when the unit is not a static decoder or is not run."""
    form, v = unit.export.static, unit.verify
    if form is None or not v.run:
        return {}
    one_graph = form.decode == "prefill"
    reads = [point.get("seq", 1) for point in v.points] * v.inputs
    text = unit.export.text
    if v.generate:
        seq = next(d for d in unit.export.dims if d.name == "seq")
        context = int(unit.lower.constants.get("max_seq_len", 0))
        prompts = ([len(p) for p in text.prompts] if text is not None
                   else seeded_prompt_lengths(seq.min, seq.max, context, v.generate))
        for length in prompts:  # the prompt, then each token eager chose: in chunks with one graph, else a call each
            reads += [length + v.generate - 1] if one_graph else [length] + [1] * (v.generate - 1)
        reads += [len(w) - 1 for w in text.windows] if text is not None else []
    reads += [reads[0]] * TIMED_CALLS if reads else []
    return driver_calls(reads, form.prefill, not one_graph)
