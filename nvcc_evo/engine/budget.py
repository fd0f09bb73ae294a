"""A retune's budget per unit and target: a time, a count of evaluations, or both.

The budget a user gives wins as given: `--evaluations N` alone is N
evaluations (no time limit), `--time-limit S` alone is S seconds (no cap on
evaluations), both are both. Given neither, the backend's default is used
(`DEFAULTS`): a time where candidates are timed (the GPU, a bench command),
a count where the answers are compiler facts that do not depend on time (a
time there would make a CI run's result depend on the machine's load).
Patience (stop after N generations without a new front point) and a
generation cap apply only when given: by default a search that stagnates
diversifies (engine.evolve) until its budget ends.

The time covers the whole search of one (unit, target): the baseline, the
search and the backend's steps after it. What those steps are expected to
take (`Backend.reserve`: a bench command's confirmation rounds and drift
runs; the GPU's confirmation, its builds and the ship check's; the static
backend's ship check and comparison builds) is kept back
from the search, so that a retune that runs out of time still confirms and
writes its choice within it.
"""
from __future__ import annotations

import math
from dataclasses import replace
from typing import NamedTuple

from nvcc_evo.driver import settings
from nvcc_evo.engine.evolve import RESTART_AFTER, Budget

INF = math.inf


class Default(NamedTuple):
    seconds: float            # per unit and target
    evaluations: float        # a cap (inf: none)
    why: str


DEFAULTS = {
    "pycuda": Default(180.0, INF, "kernels timed on the GPU: hundreds of binaries a minute"),
    "command": Default(300.0, INF, "a build and a run of the project's command per candidate"),
    "static": Default(INF, 60, "compiler facts, the same on any machine: a count reproduces the run"),
    "replay": Default(INF, 60, "recorded answers: a count reproduces the run"),
}
FALLBACK = DEFAULTS["static"]        # a backend not resolved yet ("auto" in code that skips run_retune)


def _given(options, name: str) -> bool:
    """The setting came from the user (command line, environment, a settings
    file), or was set in code: not left to the built-in default."""
    sources = dict(options.sources)
    key = f"retune.{name}"
    if key in sources:
        return sources[key] != settings.DEFAULT
    return getattr(options, settings.BY_NAME[key].field_name) is not None


def decided(options):
    """`options` with the budget filled in: the user's, else the backend's
    default (its source saying so)."""
    evaluations, seconds = _given(options, "evaluations"), _given(options, "time-limit")
    if evaluations or seconds:
        return replace(options, evaluations=options.evaluations if evaluations else INF,
                       seconds=options.seconds if seconds else INF)
    default = DEFAULTS.get(options.backend, FALLBACK)
    said = f"built-in default for the {options.backend} backend"
    sources = {**dict(options.sources), "retune.evaluations": said, "retune.time-limit": said}
    return replace(options, evaluations=default.evaluations, seconds=default.seconds,
                   sources=tuple(sources.items()))


class Spent(NamedTuple):
    """What the search of one (unit, target) has not got of its time: the
    seconds already spent (the baseline) and those kept for the steps after it."""
    seconds: float = 0.0
    reserve: float = 0.0


def budget_of(options, spent: Spent = Spent(), log=lambda said: None) -> Budget:
    """The search's Budget: the options' (decided), with the time spent on
    this unit so far and the time kept back for the steps after the search
    taken off (said through `log` when that leaves the search little)."""
    options = decided(options) if options.evaluations is None or options.seconds is None else options
    seconds = INF
    if math.isfinite(options.seconds):
        seconds = max(0.0, options.seconds - spent.seconds - spent.reserve)
        if spent.reserve:
            log(f"{spent.reserve:.0f} s of the {options.seconds:g} s budget kept for the steps after the search "
                f"(the backend's confirmation, drift runs, ship check, comparison builds): {seconds:.0f} s to search"
                + (" (raise --time-limit to search at all)" if seconds == 0 else ""))
    return Budget(options.evaluations, options.generations if options.generations is not None else INF,
                  seconds, options.patience)


def describe(options) -> str:
    """The budget in words, said before the search: `budget 180 s (built-in
    default for the pycuda backend)`."""
    options = decided(options) if options.evaluations is None or options.seconds is None else options
    parts = []
    if math.isfinite(options.seconds):
        parts.append(f"{options.seconds:g} s")
    if math.isfinite(options.evaluations):
        parts.append(f"{options.evaluations} evaluations")
    source = dict(options.sources).get("retune.time-limit" if math.isfinite(options.seconds)
                                       else "retune.evaluations", "")
    said = "budget " + (" or ".join(parts) or "none") + (f" ({source})" if source.startswith("built-in") else "")
    if options.patience is not None:
        said += f", stopping after {options.patience} generations without a new front point"
    return said


def time_left(budget: Budget, elapsed: float) -> float | None:
    """Seconds the search has left (None: no time limit)."""
    return max(0.0, budget.seconds - elapsed) if math.isfinite(budget.seconds) else None


def stagnation(engine) -> tuple[tuple[str, str], ...]:
    """The progress line's words for a search that stagnates (it diversifies)
    and for the proposals what it learned kept it from (engine.learned)."""
    said = []
    if engine.stale >= RESTART_AFTER:
        said.append(("stagnant", f"{engine.stale} generations: diversifying"))
    if engine.avoided:
        said.append(("avoided", f"{len(engine.avoided)} known to fail or not taken by the build"))
    return tuple(said)
