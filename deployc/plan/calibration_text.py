"""The text a calibrated decoder's quantizer observes, tokenized when the plan is made and kept apart from
the held-out text the program is judged on: a figure measured on text the observers saw says how well the
ranges fit that text, not how the program does on the next one. Never imports torch."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from deployc.plan.build_plan import CalibrationText
from deployc.plan.heldout import MAX_CHARS

DEFAULT_SAMPLE = Path(__file__).with_name("calibration_sample.txt")  # English prose written for deployc
SAMPLE_NAME = "deployc's calibration sample (deployc/plan/calibration_sample.txt)"
SEQUENCE = 128  # tokens per calibration stretch, bos included (fewer when the context is shorter)
# Words in a row that the calibration text may not share with the held-out text: two texts share a phrase by
# chance, not twelve words.
SHARED_WORDS = 12


def sequence_length(context: int) -> int:
    return max(2, min(SEQUENCE, context))


def needed(context: int, samples: int, bos: int | None) -> int:
    """Tokens the text must give: `samples` stretches that do not overlap."""
    return samples * (sequence_length(context) - (bos is not None))


def calibration_text(ids: Sequence[int], bos: int | None, context: int, samples: int, file: str, sha256: str,
                     tokenizer: str) -> CalibrationText:
    """`samples` consecutive stretches of `ids` (which holds at least needed() tokens), each with the model's
    bos first, as a prompt starts."""
    body = sequence_length(context) - (bos is not None)
    stretches = [list(ids[j * body:(j + 1) * body]) for j in range(samples)]
    return CalibrationText(file=file, sha256=sha256, tokenizer=tokenizer,
                           sequences=[[bos, *s] if bos is not None else s for s in stretches])


def shared_run(calibration: str, judged: str) -> str | None:
    """The first run of SHARED_WORDS words of `calibration` that `judged` holds too (whitespace aside), or None.
    Compared as words, not tokens: a tokenizer that maps most words to one unknown id would make any two
    texts share runs of ids."""
    def runs(text: str) -> list[tuple[str, ...]]:
        words = text.split()
        return [tuple(words[i:i + SHARED_WORDS]) for i in range(len(words) - SHARED_WORDS + 1)]

    seen = set(runs(judged[:MAX_CHARS]))
    return next((" ".join(run) for run in runs(calibration[:MAX_CHARS]) if run in seen), None)
