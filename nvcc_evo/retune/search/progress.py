"""A retune's progress on stderr: a live bar (rich, the `progress` extra) on
a terminal, else one plain line per generation, as CI logs and `2>file` get.

`ProgressLine` holds the fields of one report in one place: the plain line
(`text`) and the bar (`bar_text`) are both drawn from it, so a new field
(the cost breakdown, say) is added once. retune makes one `Reporter` per
(unit, target) with `reporter()`, calls `advance` after every measured
candidate (the bar moves; the lines wait for the generation), `update`
after every generation and `close` at the end; the bar is never imported on
the compile path. Several searches at once share one `Board`, a row each.
"""
from __future__ import annotations

import math
import sys
from dataclasses import dataclass, field
from typing import Callable, Iterator, Protocol, TextIO

from nvcc_evo.engine.budget import stagnation
from nvcc_evo.engine.evolve import Budget, Engine, Progress
from nvcc_evo.execute.goal import Goal
from nvcc_evo.execute.measured import Measured

MODES = ("auto", "bar", "lines")
Say = Callable[[str], None]         # where a plain line goes (system.say.log)


@dataclass(frozen=True)
class ProgressLine:
    """One generation's state of one search."""

    unit: str                                   # the task: `"spill.cu" [sm_90]`
    generation: int
    evaluations: int                            # done, those read back from the store included
    budget: float                               # evaluations allowed (inf: none)
    reused: int                                 # same binary as an earlier candidate
    failures: tuple[tuple[str, int, str], ...]  # (status, count, first message), most first
    front: int                                  # points on the Pareto front
    best: tuple[tuple[str, float], ...]         # (objective, value) of the best feasible point
    baseline: tuple[tuple[str, float], ...]     # (objective, value) of the baseline
    elapsed: float                              # seconds, this run
    made: int                                   # evaluations made by this run (the pace's)
    drift: float | None = None                  # the backend's baseline drift, where it has one
    costs: str = ""                             # the cost breakdown: candidates/min, s per stage
    # (name, text) more fields, shown as given
    extra: tuple[tuple[str, str], ...] = field(default=())
    seconds_left: float | None = None           # of the search's time budget (None: no limit)

    @property
    def failed(self) -> int:
        return sum(count for _, count, _ in self.failures)

    @property
    def seconds_per_candidate(self) -> float | None:
        return self.elapsed / self.made if self.made else None

    @property
    def left(self) -> int | None:
        if self.evaluations < self.budget < math.inf:
            return int(self.budget - self.evaluations)
        return None

    @property
    def eta(self) -> float | None:
        """Seconds the evaluations left take at this pace, where they, not the time budget, end the
        search; None where the time left ends it first (a cap of 10000 evaluations names no ETA
        beside "40 s left")."""
        pace = self.seconds_per_candidate
        eta = pace * self.left if pace is not None and self.left is not None else None
        if eta is None or (self.seconds_left is not None and eta >= self.seconds_left):
            return None
        return eta

    def _best(self) -> str:
        return ", ".join(f"{m}={v:.4g}" for m, v in self.best) if self.best else "none feasible"

    def _failed(self) -> str:
        if not self.failed:
            return "0 failed"
        examples = "; ".join(f'{s} {n} (e.g. "{e}")' for s, n, e in self.failures)
        return f"{self.failed} failed: {examples}"

    def against_baseline(self) -> str:
        """`runtime -12.3%` of the first objective against the baseline's, or ""."""
        if not self.best or not self.baseline:
            return ""
        (name, best), (_, base) = self.best[0], self.baseline[0]
        if not (math.isfinite(best) and math.isfinite(base)) or base == 0:
            return ""
        return f"{name} {best / base - 1:+.1%} vs baseline"

    def text(self) -> str:
        """The plain line, one per generation."""
        noted = f", baseline drift {self.drift:+.2%}" if self.drift is not None else ""
        pace = ""
        if self.eta is not None:
            pace = f"; at most {self.left} more, ~{self.eta:.0f} s at this pace"
        pace += f"; {self.seconds_left:.0f} s left" if self.seconds_left is not None else ""
        more = "".join(f", {name} {value}" for name, value in self.extra)
        costs = "; " + self.costs if self.costs else ""
        return (f"{self.unit} gen {self.generation}: {self.evaluations} evaluations "
                f"({self.reused} same binary, {self._failed()}), front {self.front}, "
                f"best {self._best()}{noted}{more} [{self.elapsed:.0f} s{pace}{costs}]")

    def bar_text(self) -> str:
        """The fields beside the bar (short: the bar has one line)."""
        failed = ", ".join(f"{s} {n}" for s, n, _ in self.failures) or "none"
        pace = self.seconds_per_candidate
        parts = [f"gen {self.generation}", f"best {self._best()}", self.against_baseline(),
                 f"failed: {failed}", f"{pace:.1f} s/candidate" if pace is not None else "",
                 f"ETA {self.eta:.0f} s" if self.eta is not None else "",
                 f"{self.seconds_left:.0f} s left" if self.seconds_left is not None else ""]
        parts += [f"{name} {value}" for name, value in self.extra] + [self.costs]
        return " | ".join(p for p in parts if p)


def progress_line(unit: str, goal: Goal, progress: Progress, engine: Engine, measured: Measured,
                  baseline_drift: Callable[[], float | None] | None = None,
                  budget: Budget | None = None) -> ProgressLine:
    """One generation's line of a search (retune.search.tune): the engine's front, what was
    measured (execute.measured.Measured: its tally and the baseline), the budget's time left."""
    front = engine.front()
    t = measured.tally
    base = measured.baseline
    best = tuple(zip(goal.minimize, goal.values(front[0].objectives))) if front else ()
    made = max(1, progress.evaluations - progress.resumed)      # this run's pace, not the store's
    # the backend's baseline again (its `drift`; None: not known)
    drift = baseline_drift() if baseline_drift else None
    return ProgressLine(
        unit, progress.generation, progress.evaluations,
        budget.evaluations if budget is not None else float("inf"), t.reused,
        tuple((status, seen.count, seen.example) for status, seen in t.most_failures()),
        len(front), best, tuple((m, float(base[m])) for m in goal.minimize if m in base),
        progress.elapsed(), made, drift, costs=t.costs_text(), extra=stagnation(engine),
        seconds_left=_left(budget))


def _left(budget: Budget | None) -> float | None:
    """Seconds the search has left, as its deadline says (None: no time limit)."""
    left = budget.deadline.search_left() if budget is not None else math.inf
    return left if math.isfinite(left) else None


class Reporter(Protocol):
    """One search's progress, as the search moves it (Lines, Bar, a Board's row)."""

    def advance(self) -> None: ...              # one more candidate measured

    def update(self, line: ProgressLine) -> None: ...   # a generation done

    def close(self) -> None: ...


class Lines:
    """One plain line per generation (stderr not a terminal, or asked for)."""

    def __init__(self, unit: str, budget: float, stream: TextIO, say: Say, done: int = 0):
        self.say = say

    def advance(self) -> None:
        pass                                    # one line per generation, not per candidate

    def update(self, line: ProgressLine) -> None:
        self.say(line.text())

    def close(self) -> None:
        pass


class Bar:
    """rich's live bar: unit, evaluations of the budget and time on one line,
    the line's fields on the next. Messages printed meanwhile go above it;
    the last plain line stays in the scrollback when the search ends."""

    def __init__(self, unit: str, budget: float, stream: TextIO, say: Say, done: int = 0):
        from rich.console import Console, RenderableType
        from rich.markup import escape
        from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn,
                                   TimeElapsedColumn)
        from rich.text import Text

        class TwoLines(Progress):
            info = "compiling the baseline and the first generation"

            def get_renderables(self) -> Iterator[RenderableType]:
                yield self.make_tasks_table(self.tasks)
                yield Text("  " + self.info, overflow="fold")

        self.say = say
        self.last: ProgressLine | None = None
        console = Console(file=stream, stderr=stream is sys.stderr)
        self.progress = TwoLines(TextColumn("[bold]{task.description}"), BarColumn(bar_width=None),
                                 MofNCompleteColumn(), TimeElapsedColumn(), console=console,
                                 transient=True, redirect_stderr=True, expand=True)
        total = budget if math.isfinite(budget) else None
        self.task = self.progress.add_task(escape(unit), total=total, completed=done)
        self.progress.start()

    def advance(self) -> None:
        """One more candidate measured: the bar moves now, not at the generation's end."""
        self.progress.update(self.task, advance=1, refresh=True)

    def update(self, line: ProgressLine) -> None:
        self.last = line
        self.progress.info = line.bar_text()
        self.progress.update(self.task, completed=line.evaluations)

    def close(self) -> None:
        self.progress.stop()
        if self.last is not None:
            self.say(self.last.text())          # the record a terminal keeps


class Board:
    """rich's live bars of several searches at once (execute.together): one
    display, a row per running search (unit, bar, evaluations of the budget,
    time, the line's fields beside it), added as a search starts and taken
    away as it ends, its last plain line kept in the scrollback."""

    def __init__(self, stream: TextIO, say: Say) -> None:
        from rich.console import Console
        from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn,
                                   TimeElapsedColumn)
        self.say = say
        console = Console(file=stream, stderr=stream is sys.stderr)
        self.progress = Progress(TextColumn("[bold]{task.description}"), BarColumn(bar_width=24),
                                 MofNCompleteColumn(), TimeElapsedColumn(),
                                 TextColumn("{task.fields[info]}", markup=False), console=console,
                                 transient=True, redirect_stderr=True, expand=False)
        self.progress.start()

    def row(self, unit: str, budget: float, done: int = 0) -> "BoardRow":
        return BoardRow(self, unit, budget, done)

    def close(self) -> None:
        self.progress.stop()


class BoardRow:
    """One search's row of a Board: a Reporter (advance, update, close)."""

    def __init__(self, board: Board, unit: str, budget: float, done: int):
        from rich.markup import escape
        self.board = board
        self.last: ProgressLine | None = None
        total = budget if math.isfinite(budget) else None
        self.task = board.progress.add_task(
            escape(unit), total=total, completed=done,
            info="compiling the baseline and the first generation")

    def advance(self) -> None:
        self.board.progress.update(self.task, advance=1, refresh=True)

    def update(self, line: ProgressLine) -> None:
        self.last = line
        self.board.progress.update(self.task, completed=line.evaluations, info=line.bar_text())

    def close(self) -> None:
        self.board.progress.remove_task(self.task)
        if self.last is not None:
            self.board.say(self.last.text())


def board_for(mode: str, say: Say, stream: TextIO | None = None) -> Board | None:
    """A Board where `mode` and the stream call for bars and rich is installed, else None
    (lines)."""
    stream = stream or sys.stderr
    if not wants_bar(mode, stream):
        return None
    try:
        return Board(stream, say)
    except ImportError:
        if mode == "bar":
            say("the progress bars need rich (pip install 'nvcc-evo[progress]'): one line per "
                "generation")
        return None


def wants_bar(mode: str, stream: TextIO | None = None) -> bool:
    stream = stream or sys.stderr
    return mode == "bar" or (mode == "auto" and hasattr(stream, "isatty") and stream.isatty())


def reporter(mode: str, unit: str, budget: float, say: Say, stream: TextIO | None = None,
             done: int = 0) -> Reporter:
    """A Bar where `mode` and the stream call for one and rich is installed,
    else Lines (said once when a bar was asked for and cannot be had).
    `done`: evaluations made before (read back from the results store)."""
    stream = stream or sys.stderr
    if wants_bar(mode, stream):
        try:
            return Bar(unit, budget, stream, say, done)
        except ImportError:
            if mode == "bar":
                say("the progress bar needs rich (pip install 'nvcc-evo[progress]'): one line per "
                    "generation")
    return Lines(unit, budget, stream, say, done)
