"""The one exception tree of nvcc-evo, and the exit codes the CLI maps it to.

Only the CLI (nvcc_evo.cli) catches these; every other module raises them with
structured fields and lets them travel.
"""
from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum


class ExitCode(IntEnum):
    """Exit codes of nvcc-evo's own verbs (the wrapper passes nvcc's through)."""

    OK = 0
    INVALID_INPUT = 1      # an ACF with errors, or `--acf-fmt --check` found changes
    USAGE = 2              # bad command line for one of nvcc-evo's own verbs
    ENVIRONMENT = 3        # real nvcc not found, recursion, missing GPU backend
    INTERRUPTED = 130      # Ctrl-C; everything measured so far is kept


@dataclass(frozen=True)
class Location:
    """A place in a text file, 1-based like compilers print it."""

    path: str
    line: int
    column: int

    def __str__(self) -> str:
        return f"{self.path}:{self.line}:{self.column}"


@dataclass(frozen=True)
class Diagnostic:
    """One located message with the source line it points into."""

    location: Location
    message: str
    source_line: str = ""
    severity: str = "error"

    def __str__(self) -> str:
        head = f"{self.location}: {self.severity}: {self.message}"
        if not self.source_line:
            return head
        caret = " " * (self.location.column - 1) + "^"
        return f"{head}\n{self.source_line}\n{caret}"


class EvoError(Exception):
    """Base of every error nvcc-evo reports to a user."""

    exit_code = ExitCode.INVALID_INPUT


class AcfError(EvoError):
    """One or more diagnostics in one ACF file."""

    def __init__(self, diagnostics: list[Diagnostic]):
        self.diagnostics = tuple(diagnostics)
        super().__init__("\n".join(str(d) for d in self.diagnostics))


class UsageError(EvoError):
    exit_code = ExitCode.USAGE


class EnvironmentProblem(EvoError):
    """The machine lacks what the command needs (nvcc, a GPU, a backend)."""

    exit_code = ExitCode.ENVIRONMENT
