"""The one exception tree of nvcc-evo, and the exit codes the CLI maps it to.

The CLI (nvcc_evo.cli) catches these at the top and turns them into a message
and an exit code. Every other module raises them with structured fields and
lets them travel, except where the run goes on without what failed: a build
compiles untuned and warns (driver.wrapper, driver.dropin_ptxas, and
driver.explain, which says so), a retune skips the write-back of an ACF that
changed under it (retune.run) or builds a candidate from the ACF it started
with (execute.measurers), a kernel comparison goes without a bench it cannot
plan (kerneldiff.compare); and where one is raised again with more said (which
file named an nvcc, which verb, which cluster).
"""
from __future__ import annotations

from enum import IntEnum

from nvcc_evo.system.say import visible       # (the one escaping of what a message prints)


class ExitCode(IntEnum):
    """Exit codes of nvcc-evo's own verbs (the wrapper passes nvcc's through)."""

    OK = 0
    INVALID_INPUT = 1      # an ACF with errors, or `--acf-fmt --check` found changes
    USAGE = 2              # bad command line for one of nvcc-evo's own verbs
    ENVIRONMENT = 3        # real nvcc not found, recursion, missing GPU backend
    INTERRUPTED = 130      # Ctrl-C; everything measured so far is kept


# Plain classes, not dataclasses: this module is on every compile's path, and
# importing dataclasses costs a compile about 15 ms.
class Location:
    """A place in a text file, 1-based like compilers print it."""

    __slots__ = ("path", "line", "column")

    def __init__(self, path: str, line: int, column: int):
        self.path, self.line, self.column = path, line, column

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, Location)
                and (self.path, self.line, self.column) == (other.path, other.line, other.column))

    def __hash__(self) -> int:
        return hash((self.path, self.line, self.column))

    def __repr__(self) -> str:
        return f"Location({self.path!r}, {self.line}, {self.column})"

    def __str__(self) -> str:
        return f"{self.path}:{self.line}:{self.column}"


class Diagnostic:
    """One located message with the source line it points into."""

    __slots__ = ("location", "message", "source_line", "severity")

    def __init__(self, location: Location, message: str, source_line: str = "",
                 severity: str = "error"):
        self.location, self.message = location, message
        self.source_line, self.severity = source_line, severity

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Diagnostic) and str(self) == str(other)

    def __hash__(self) -> int:
        return hash(str(self))

    def __repr__(self) -> str:
        return f"Diagnostic({self.location!r}, {self.message!r})"

    def __str__(self) -> str:
        head = visible(f"{self.location}: {self.severity}: {self.message}")
        if not self.source_line:
            return head
        source, column = self.source_line, self.location.column
        line, column = _shown_line(visible(source), len(visible(source[:column - 1])) + 1)
        pad = "".join("\t" if c == "\t" else " " for c in line[:column - 1]).ljust(column - 1)
        return f"{head}\n{line}\n{pad}^"        # (the line's tabs kept: the caret stands where a
                                                # terminal shows it)


# A source line longer than this is shown around its column: a minified file's whole 1 MB line,
# and a caret line as long, would otherwise be the message.
SHOWN_LINE = 160


def _shown_line(line: str, column: int) -> tuple[str, int]:
    """The source line as shown under a message, and the caret's column in it."""
    if len(line) <= SHOWN_LINE:
        return line, column
    start = max(0, min(column - 1 - SHOWN_LINE // 2, len(line) - SHOWN_LINE))
    shown = ("..." if start else "") + line[start:start + SHOWN_LINE] + \
        ("..." if start + SHOWN_LINE < len(line) else "")
    return shown, column - start + (3 if start else 0)


class Interrupted(KeyboardInterrupt):
    """Ctrl-C, with what was kept and how to go on: the CLI says it, once,
    and exits with ExitCode.INTERRUPTED."""


class EvoError(Exception):
    """Base of every error nvcc-evo reports to a user."""

    exit_code = ExitCode.INVALID_INPUT


class AcfError(EvoError):
    """One or more diagnostics in one ACF file; `files`: the files beside it
    that the check looked at (its verdict depends on them too)."""

    def __init__(self, diagnostics: list[Diagnostic], files: tuple[str, ...] = ()):
        self.diagnostics, self.files = tuple(diagnostics), files
        super().__init__("\n".join(str(d) for d in self.diagnostics))


class LocatedError(EvoError):
    """Diagnostics in a file nvcc-evo reads that is not an ACF (a kernel
    profile): `path:LINE:COL: error: ...`, printed as they are."""

    def __init__(self, diagnostics: list[Diagnostic]):
        self.diagnostics = tuple(diagnostics)
        super().__init__("\n".join(str(d) for d in self.diagnostics))


class UsageError(EvoError):
    exit_code = ExitCode.USAGE


class EnvironmentProblem(EvoError):
    """The machine lacks what the command needs (nvcc, a GPU, a backend)."""

    exit_code = ExitCode.ENVIRONMENT


class NotWritable(EnvironmentProblem):
    """A file nvcc-evo must rewrite (an ACF) or its folder is read-only: it is
    left as it is, never replaced."""


class AcfChanged(EvoError):
    """The ACF changed under a retune so that a result no longer has its place
    (its unit is gone or has other globs) or is stale (pins or search space
    edited since the search began): the result is not written."""
