"""The only place that prints. stdout carries results (one JSON document under --json);
stderr carries progress, tables meant for people, warnings and errors."""

from __future__ import annotations

import json
import sys
from typing import Any

from rich.console import Console as RichConsole
from rich.table import Table


class Console:
    def __init__(self, json_mode: bool = False, quiet: bool = False) -> None:
        self.json_mode = json_mode
        self.quiet = quiet
        # Wide tables when piped (CI logs), the terminal's width otherwise.
        self.out = RichConsole(file=sys.stdout, highlight=False, soft_wrap=True, width=None if sys.stdout.isatty() else 160)
        self.err = RichConsole(file=sys.stderr, highlight=False, soft_wrap=True, width=None if sys.stderr.isatty() else 160)

    def result(self, text: str) -> None:
        """A line of the command's result, for people (suppressed under --json)."""
        if not self.json_mode:
            self.out.print(text, markup=False)

    def table(self, table: Table) -> None:
        if not self.json_mode:
            self.out.print(table)

    def document(self, data: Any) -> None:
        """The one JSON document of a --json run."""
        sys.stdout.write(json.dumps(data, indent=2, sort_keys=False) + "\n")
        sys.stdout.flush()

    def status(self, text: str) -> None:
        if not self.quiet:
            self.err.print(text, markup=False)

    def warn(self, text: str) -> None:
        self.err.print(f"warning: {text}", markup=False, style="yellow")

    def error_lines(self, lines: list[str]) -> None:
        for line in lines:
            self.err.print(line, markup=False, style="red" if ": error: " in line or line.startswith("error") else None)
