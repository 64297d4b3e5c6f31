"""Hostile YAML: refused without expanding it (bounded memory, and a hang fails the test instead of
stalling CI); only plain types load. How fast: benchmarks/cli_bench.py."""

from __future__ import annotations

import resource
import signal
from pathlib import Path

import pytest

from deployc.core.errors import UserError
from deployc.core.yaml_io import load_text


def _bomb(levels: int) -> str:
    lines = ['a0: &a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for i in range(1, levels):
        refs = ",".join([f"*a{i - 1}"] * 9)
        lines.append(f"a{i}: &a{i} [{refs}]")
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("text,message", [
    (_bomb(9), "alias bomb"),
    ("a: " + "[" * 20000 + "]" * 20000 + "\n", "nested deeper"),
    ("a: " + "x" * (2 << 20) + "\n", "larger than"),
])
def test_hostile_yaml_refused_with_bounded_memory(text: str, message: str) -> None:
    def hung(*_: object) -> None:
        raise AssertionError("still loading after 30 s: the document is being expanded")

    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    previous = signal.signal(signal.SIGALRM, hung)
    signal.alarm(30)
    try:
        with pytest.raises(UserError) as info:
            load_text(text, Path("evil.yaml"))
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    assert message in info.value.diagnostics[0].message
    grown_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    assert grown_kib < 200 * 1024


def test_only_plain_yaml_types_load() -> None:
    with pytest.raises(UserError) as info:
        load_text("a: !!python/object/apply:os.system ['true']\n", Path("evil.yaml"))
    assert "unsupported YAML tag" in info.value.diagnostics[0].message
    with pytest.raises(UserError) as info:
        load_text("base: &b {x: 1}\nother:\n  <<: *b\n", Path("merge.yaml"))
    assert "merge keys" in info.value.diagnostics[0].message
