"""What people see: a live table of builds on a terminal, plain lines elsewhere, usage errors with the
usage line."""

from __future__ import annotations

import io
from pathlib import Path

from deployc.cli.console import Console
from deployc.core.events import Event

EVENTS = [
    Event(label="a@t/cpu", kind="queued"), Event(label="b@t/cpu", kind="queued"),
    Event(label="a@t/cpu", kind="started", attempt=1, where="this machine (pid 7)"),
    Event(label="a@t/cpu", kind="step", step="lower"),
    Event(label="b@t/cpu", kind="started", attempt=2, max_attempts=4, where="node 1234 (pid 9)"),
    Event(label="a@t/cpu", kind="finished", status="built"),
]


def test_plain_lines_when_not_a_terminal() -> None:
    err = io.StringIO()
    console = Console(terminal=False, err=err)
    with console.progress() as events:
        for e in EVENTS:
            events(e)
    assert err.getvalue().splitlines() == [
        "  a@t/cpu: running on this machine (pid 7)", "  a@t/cpu: lower",
        "  b@t/cpu: retry 1 of 3, running on node 1234 (pid 9)", "  a@t/cpu: built"]


def test_a_live_table_on_a_terminal() -> None:
    err = io.StringIO()
    console = Console(terminal=True, err=err)
    with console.progress() as events:
        for e in EVENTS:
            events(e)
    screen = err.getvalue()
    assert "\x1b[" in screen  # drawn in place with terminal control codes
    last = screen.split("\x1b[2K")[-3:]  # the final frame: two rows and the bar
    final = "".join(last)
    assert "a@t/cpu" in final and "built" in final
    assert "b@t/cpu" in final and "retry 1 of 3, running on node 1234 (pid 9)" in final
    assert "programs" in final and "1/2" in final


def test_verbose_keeps_plain_lines_on_a_terminal() -> None:
    err = io.StringIO()
    console = Console(terminal=True, verbose=True, err=err)
    with console.progress() as events:
        events(EVENTS[3])
    assert "a@t/cpu: lower" in err.getvalue()


def test_usage_errors_exit_2_with_the_usage_line(cli, tmp_path: Path) -> None:
    r = cli("plan", str(tmp_path / "m.yaml"), "--bogus")
    assert r.code == 2
    assert r.err.splitlines()[0].startswith("Usage: deployc plan [OPTIONS]")
    assert "error: No such option: --bogus" in r.err and "internal error" not in r.err
    r = cli("plan")
    assert r.code == 2 and "Missing argument" in r.err
    r = cli("build", "--jobs", "-1", "m.yaml")
    assert r.code == 2 and "Invalid value for '--jobs'" in r.err
    r = cli("frobnicate")
    assert r.code == 2 and "No such command 'frobnicate'" in r.err
