"""A search's budget: a time, a count of evaluations, or both, and what is left of it.

What the user asked for, decided (retune.options.decided: the user's budget
as given, else the backend's default), reaches the engine as an `Asked`
(any value with those four numbers). Patience (stop after N generations
without a new front point) and a generation cap apply only when given: by
default a search that stagnates diversifies (engine.evolve) until its
budget ends.

The time covers the whole search of one (unit, target): the baseline, the
search and the backend's steps after it. What those steps are expected to
take (`Spent.reserve`: a bench command's confirmation rounds and drift
runs; the GPU's confirmation, its builds and the ship check's; the static
backend's ship check and comparison builds) is kept back
from the search, so that a retune that runs out of time still confirms and
writes its choice within it.
"""
from __future__ import annotations

import math
from typing import Callable, NamedTuple, Protocol

from nvcc_evo.engine.evolve import RESTART_AFTER, Budget, Engine

INF = math.inf


class Asked(Protocol):
    """The budget a retune decided (retune.options.Options is one): inf where there is no limit."""

    @property
    def seconds(self) -> float: ...

    @property
    def evaluations(self) -> float: ...

    @property
    def generations(self) -> float | None: ...

    @property
    def patience(self) -> int | None: ...


class Spent(NamedTuple):
    """What the search of one (unit, target) has not got of its time: the
    seconds already spent (the baseline) and those kept for the steps after it."""
    seconds: float = 0.0
    reserve: float = 0.0


def budget_of(asked: Asked, spent: Spent = Spent(), log: Callable[[str], None] = lambda said: None) -> Budget:
    """The search's Budget: the one asked for, with the time spent on this
    unit so far and the time kept back for the steps after the search taken
    off (said through `log` when that leaves the search little)."""
    seconds = INF
    if math.isfinite(asked.seconds):
        seconds = max(0.0, asked.seconds - spent.seconds - spent.reserve)
        if spent.reserve:
            log(f"{spent.reserve:.0f} s of the {asked.seconds:g} s budget kept for the steps after the search "
                f"(the backend's confirmation, drift runs, ship check, comparison builds): {seconds:.0f} s to search"
                + (" (raise --time-limit to search at all)" if seconds == 0 else ""))
    return Budget(asked.evaluations, asked.generations if asked.generations is not None else INF,
                  seconds, asked.patience)


def time_left(budget: Budget, elapsed: float) -> float | None:
    """Seconds the search has left (None: no time limit)."""
    return max(0.0, budget.seconds - elapsed) if math.isfinite(budget.seconds) else None


def stagnation(engine: Engine) -> tuple[tuple[str, str], ...]:
    """The progress line's words for a search that stagnates (it diversifies),
    for the proposals what it learned kept it from (execute.learned), those
    the surrogate made and what it started from (engine.surrogate)."""
    said = []
    if engine.stale >= RESTART_AFTER:
        said.append(("stagnant", f"{engine.stale} generations: diversifying"))
    if engine.avoided:
        said.append(("avoided", f"{len(engine.avoided)} known to fail or not taken by the build"))
    if engine.guided:
        said.append(("guided", f"{engine.guided} proposed by the surrogate"))
    if engine.warm:
        said.append(("warm start", f"{sum(map(len, engine.warm))} evaluations of {len(engine.warm)} other "
                                   "context(s) (another GPU, toolkit or source)"))
    return tuple(said)
