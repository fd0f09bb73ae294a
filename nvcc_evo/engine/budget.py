"""A search's budget: a time, a count of evaluations, or both, and what is left of it.

What the user asked for, decided (retune.scope.options: the user's budget as
given, else the backend's default), reaches the engine as an `Asked` (any
value with the caps: evaluations, generations, patience) and a
`system.clock.Deadline` (the time). Patience (stop after N generations
without a new front point) and a generation cap apply only when given: by
default a search that stagnates diversifies (engine.evolve) until its
budget ends.

The time covers the whole search of one (unit, target): the baseline, the
search and the backend's steps after it. What those steps are expected to
take (`Deadline.reserve`: a bench command's confirmation rounds and drift
runs; the GPU's confirmation, its builds and the ship check's; the static
backend's ship check and comparison builds) is kept back
from the search, so that a retune that runs out of time still confirms and
writes its choice within it.
"""
from __future__ import annotations

import math
from typing import Callable, Protocol

from nvcc_evo.engine.evolve import RESTART_AFTER, Budget, Engine
from nvcc_evo.system.clock import NONE, Deadline

INF = math.inf


class Asked(Protocol):
    """The budget a retune decided (retune.scope.options.Limits is one): inf where there is no
    cap."""

    @property
    def evaluations(self) -> float: ...

    @property
    def generations(self) -> float | None: ...

    @property
    def patience(self) -> int | None: ...


def budget_of(asked: Asked, deadline: Deadline = NONE,
              log: Callable[[str], None] = lambda said: None) -> Budget:
    """The search's Budget: the caps asked for and the search's `deadline`
    (its time, less what is kept back for the steps after the search: said
    through `log` when there is such a reserve)."""
    if deadline.limited and deadline.reserve:
        left = deadline.search_left()
        log(f"{deadline.reserve:.0f} s of the {deadline.seconds:g} s budget kept for the steps "
            "after the search (the backend's confirmation, drift runs, ship check, comparison "
            f"builds): {left:.0f} s to search"
            + (" (raise --time-limit to search at all)" if left == 0 else ""))
    return Budget(asked.evaluations, asked.generations if asked.generations is not None else INF,
                  asked.patience, deadline)


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
    if engine.bayes is not None and engine.bayes.proposed:
        said.append(("bayes", f"{engine.bayes.proposed} proposed by the Gaussian process"))
    if engine.warm:
        whence = ", ".join(f"{count} from {origin}" for origin, count in engine.warm_seeds.items())
        seeds = f"{sum(engine.warm_seeds.values())} seed(s)" + (f": {whence}" if whence else "")
        modelled = engine.guide is not None or engine.bayes is not None
        said.append(("warm start", f"{seeds}; {sum(map(len, engine.warm))} evaluations known"
                     + (", starting the model" if modelled else "")))
    return tuple(said)
