"""The only place that prints. stdout carries results (one JSON document under --json); stderr
carries progress, tables meant for people, warnings and errors.

Build progress is a live table on a terminal (a row per program with its step, a spinner and the
time it has taken, and a bar of programs done) and plain lines everywhere else (CI logs, pipes).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cached_property
from typing import IO, TYPE_CHECKING, Any

from deployc.core.events import Event, EventSink

if TYPE_CHECKING:  # rich is imported when something is printed for people: a --json run never loads it
    from rich.console import Console as RichConsole
    from rich.progress import TaskID
    from rich.table import Table


def _rich(stream: IO[str], terminal: bool | None) -> RichConsole:
    from rich.console import Console as RichConsole

    # Wide lines when piped (CI logs), the terminal's width otherwise.
    wide = None if (terminal if terminal is not None else stream.isatty()) else 160
    return RichConsole(file=stream, highlight=False, soft_wrap=True, width=wide, force_terminal=terminal)


def event_line(e: Event) -> str | None:
    """How an event reads as a plain line; None for the ones only the live table shows."""
    if e.kind == "started":
        retry = f"retry {e.attempt - 1} of {e.max_attempts - 1}, " if e.attempt > 1 else ""
        return f"  {e.label}: {retry}running on {e.where}"
    if e.kind == "step":
        return f"  {e.label}: {e.step}"
    if e.kind == "finished":
        return f"  {e.label}: {e.status}" + (f" ({e.where})" if e.where else "")
    return None


class _LiveBuild:
    """A row per program and an overall bar, redrawn in place."""

    def __init__(self, console: RichConsole) -> None:
        from rich.console import Group
        from rich.live import Live
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            SpinnerColumn,
            TextColumn,
            TimeElapsedColumn,
        )

        self.rows = Progress(SpinnerColumn(finished_text=" "), TextColumn("{task.description}"),
                             TextColumn("{task.fields[step]}"), TimeElapsedColumn(), console=console)
        self.overall = Progress(TextColumn("programs"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                                console=console)
        self.total = self.overall.add_task("programs", total=0)
        self.tasks: dict[str, TaskID] = {}
        self.live = Live(Group(self.rows, self.overall), console=console, refresh_per_second=8)

    def __call__(self, e: Event) -> None:
        if not self.live.is_started:  # drawn from the first event: a build with nothing to do draws nothing
            self.live.start()
        if e.label not in self.tasks:
            self.tasks[e.label] = self.rows.add_task(e.label, total=1, start=False, step="waiting")
            self.overall.update(self.total, total=len(self.tasks))
        task = self.tasks[e.label]
        if e.kind == "started":
            self.rows.start_task(task)
            self.rows.update(task, step=(event_line(e) or "").split(": ", 1)[1])
        elif e.kind == "step":
            self.rows.update(task, step=e.step)
        elif e.kind == "finished":
            self.rows.update(task, completed=1, step=e.status)
            self.rows.stop_task(task)
            self.overall.advance(self.total)


class Console:
    def __init__(self, json_mode: bool = False, verbose: bool = False, terminal: bool | None = None,
                 out: IO[str] | None = None, err: IO[str] | None = None) -> None:
        """`terminal` forces (True) or forbids (False) terminal output; None: ask the streams."""
        self.json_mode = json_mode
        self.verbose = verbose
        self._stdout = out or sys.stdout
        self._stderr = err or sys.stderr
        self._terminal = terminal

    @cached_property
    def out(self) -> RichConsole:
        return _rich(self._stdout, self._terminal)

    @cached_property
    def err(self) -> RichConsole:
        return _rich(self._stderr, self._terminal)

    def result(self, text: str) -> None:
        """A line of the command's result, for people (suppressed under --json)."""
        if not self.json_mode:
            self.out.print(text, markup=False)

    def table(self, table: Table) -> None:
        if not self.json_mode:
            self.out.print(table)

    def document(self, data: Any) -> None:
        """The one JSON document of a --json run."""
        self._stdout.write(json.dumps(data, indent=2, sort_keys=False) + "\n")
        self._stdout.flush()

    def status(self, text: str) -> None:
        self.err.print(text, markup=False)

    def warn(self, text: str) -> None:
        self.err.print(f"warning: {text}", markup=False, style="yellow")

    def error_lines(self, lines: list[str]) -> None:
        for line in lines:
            self.err.print(line, markup=False, style="red" if ": error: " in line or line.startswith("error") else None)

    @contextmanager
    def progress(self) -> Iterator[EventSink]:
        """Where build events go while the block runs. --verbose keeps plain lines: the libraries' own
        output then shares the terminal."""
        if self.verbose or not self.err.is_terminal:
            def plain(e: Event) -> None:
                line = event_line(e)
                if line is not None:
                    self.status(line)

            yield plain
            return
        live = _LiveBuild(self.err)
        try:
            yield live
        finally:
            if live.live.is_started:
                live.live.stop()
