"""The error tree. The CLI maps each class to one exit code; nothing else decides exit codes."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True, order=True)
class Location:
    """A place in a user's file; line and col are 1-based, 0 when unknown."""

    path: str
    line: int = 0
    col: int = 0

    def __str__(self) -> str:
        if self.line:
            return f"{self.path}:{self.line}:{self.col}"
        return self.path


@dataclass(frozen=True)
class Diagnostic:
    location: Location
    message: str
    hint: str | None = None

    def render(self) -> list[str]:
        lines = [f"{self.location}: error: {self.message}"]
        if self.hint:
            lines.append(f"    hint: {self.hint}")
        return lines


class DeploycError(Exception):
    exit_code = 1

    def lines(self) -> list[str]:
        return [f"error: {self}"]


@dataclass
class UserError(DeploycError):
    """Bad input: every problem found, each located. Exit 2."""

    diagnostics: list[Diagnostic] = field(default_factory=list)
    exit_code = 2

    def __post_init__(self) -> None:
        super().__init__("; ".join(d.message for d in self.diagnostics))

    @classmethod
    def at(cls, path: str | Path, message: str, line: int = 0, col: int = 0, hint: str | None = None) -> UserError:
        return cls([Diagnostic(Location(str(path), line, col), message, hint)])

    def lines(self) -> list[str]:
        out: list[str] = []
        for d in self.diagnostics:
            out.extend(d.render())
        return out


class ManifestError(UserError):
    pass


class ProfileError(UserError):
    pass


class PlanError(UserError):
    pass


class UsageError(DeploycError):
    """A bad command-line option or environment setting (nothing in a file to point at). Exit 2."""

    exit_code = 2

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.hint = hint

    def lines(self) -> list[str]:
        return [f"error: {self}", *([f"    hint: {self.hint}"] if self.hint else [])]


class BuildError(DeploycError):
    """A build step failed (a unit, a worker, a write). Exit 1."""

    exit_code = 1


class RunError(DeploycError):
    """A bundle cannot run on this host (damaged, or a program failed). Exit 1."""

    exit_code = 1


class PlanChanged(DeploycError):
    """A saved plan no longer matches its inputs (a hashed file or the toolchain changed). Exit 2."""

    exit_code = 2


class PreprocessError(DeploycError):
    """An image or audio input that cannot be decoded or prepared (the caller names the stage). Exit 2."""

    exit_code = 2
