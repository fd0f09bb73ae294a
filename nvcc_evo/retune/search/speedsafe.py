"""A retune without a GPU must not make kernels slower.

Registers and spills cannot rank runtime: on the H200 the fewest-register
candidate without spills ran 1.07-1.98x slower than the fastest for eight
of ten kernels (BENCHMARKS.md), and a static search picked `ptxas -O1` for
most units. So:

- the auto backend, finding no GPU, tunes no unit whose tune block asks for
  what only a measurement answers (runtime, energy, a bench metric; a bench
  block and no tune block asks for its measurement too): `needs_measuring`
  says what it asks for, `how_to_measure` how to run it where it can be;
- the static backend, unless the tune block asks for compiler facts alone
  (`minimize spills, registers`), leaves out lower optimisation levels
  (`ptxas.opt_level` below 3, `-Ofc` other than 0: compile time is what they buy) and counts
  registers only by the resident warps per SM they allow (`register_warps`),
  so a register cap that does not raise occupancy ties with the baseline
  (which wins the tie: fewest knobs moved) and one that lowers it is worse
  unless it removes spills (spills come first); and no kernel of the unit
  may lose warps per SM against the baseline (infeasible where one does: a
  cap with `--override-directive-values` helped a unit's worst kernel and
  raised the registers of 8 of its 16 others).
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Callable

from nvcc_evo import backends
from nvcc_evo.acf import model
from nvcc_evo.measure import static
from nvcc_evo.measure.static import REGISTER_WARPS, register_warps
from nvcc_evo.execute.goal import Goal
from nvcc_evo.engine.space import Dimension, SearchSpace

if TYPE_CHECKING:
    from nvcc_evo.retune.scope.tasks import Task

# Values of the knobs that lower the optimisation level which a speed-safe static search keeps
# (None: the flag not passed, the toolkit's -O3).
FULL_OPTIMISATION = {"ptxas.opt_level": (None, 3), "ptxas.fast_compile": (None, "0"),
                     "nvcc.fast_compile": (None, "0")}


def needs_measuring(unit: model.Unit) -> tuple[str, ...]:
    """What the unit's tune block asks for that only a measurement answers
    (runtime, energy, a bench metric); without a tune block, what its bench
    block is there to measure. () for a unit of compiler facts only."""
    if unit.tune is not None and unit.tune.minimize:
        return tuple(m for m in unit.tune.minimize if m not in static.OBJECTIVES)
    if unit.bench is None:
        return ()
    if unit.bench.kernel is not None:
        return ("runtime",)
    return tuple(m.name for m in unit.bench.metrics[:1])


def how_to_measure(unit: model.Unit) -> str:
    """The command that tunes the unit where it can be measured."""
    named = f"nvcc-evo --retune '{unit.globs[0]}'"
    if unit.bench is not None and unit.bench.command is not None:
        return (f"{named} --backend command (its bench command; add --target sm_XX where no GPU "
                "answers)")
    return f"{named} on a machine with a GPU and PyCUDA (pip install 'nvcc-evo[gpu]')"


@dataclass(frozen=True)
class Guard:
    """What a static search of one unit leaves alone (see the module's words)."""

    levels: bool          # lower optimisation levels left out
    occupancy: bool       # registers counted by the warps per SM they allow

    def __str__(self) -> str:
        said = (["lower -O levels left out"] if self.levels else []) + \
            (["registers count only as the warps per SM they allow"] if self.occupancy else [])
        return "speed-safe: " + "; ".join(said) if said else ""


def guard_for(tune: model.Tune | None, arch: str) -> Guard:
    """The static backend's guard for a unit: off where its tune block asks
    for compiler facts alone (`minimize spills, registers`: what it gets is
    what it named), on by default and where it asks for speed."""
    if tune is not None and tune.minimize and all(m in static.OBJECTIVES for m in tune.minimize):
        return Guard(levels=False, occupancy=False)
    return Guard(levels=True, occupancy=register_warps(0, arch) is not None)


def search_guard(tune: model.Tune | None, arch: str, backend: str) -> Guard | None:
    """The guard of a search measured by `backend`: guard_for's where compiler facts are all it
    measures (its row of the table says so), else None."""
    return guard_for(tune, arch) if backends.row(backend).facts_only else None


def narrowed(space: SearchSpace, guard: Guard) -> SearchSpace:
    """`space` without the lower optimisation levels (pinned values stay: a hand decision)."""
    if not guard.levels:
        return space
    kept = []
    for d in space.dimensions:
        allowed = FULL_OPTIMISATION.get(d.knob)
        if allowed is None or d.pinned:
            kept.append(d)
            continue
        choices = tuple(c for c in d.choices if c in allowed or c == d.baseline)
        kept.append(Dimension(d.knob, choices or (d.baseline,), d.baseline))
    return replace(space, dimensions=tuple(kept))


def guarded_goal(goal: Goal, guard: Guard) -> Goal:
    """The goal with registers judged by the warps per SM they allow (maximised)."""
    if not guard.occupancy or "registers" not in goal.minimize:
        return goal
    swap = lambda names: tuple(REGISTER_WARPS if m == "registers" else m for m in names)
    note = "; ".join(n for n in (goal.note, str(guard)) if n)
    return replace(goal, minimize=swap(goal.minimize), select=swap((goal.select,))[0], note=note,
                   maximize=goal.maximize + (REGISTER_WARPS,), kernels_keep_warps=True)


def set_aside(tasks: list[Task], log: Callable[[str], None]) -> tuple[list[Task], list[Task]]:
    """The auto backend found no GPU: the tasks it may tune (compiler facts),
    and those whose unit asks for a measurement (said, one line a unit)."""
    kept: list[Task] = []
    waiting: list[Task] = []
    for task in tasks:
        (waiting if needs_measuring(task.unit) else kept).append(task)
    for unit in dict.fromkeys(task.unit for task in waiting):
        archs = ", ".join(task.arch for task in waiting if task.unit == unit)
        log(f"{unit} [{archs}]: asks for {', '.join(needs_measuring(unit))}, which only a "
            "measurement answers; no GPU here (backend auto is static): not tuned, nothing written")
    return kept, waiting


def say_waiting(waiting: list[Task], log: Callable[[str], None]) -> None:
    """Which units need a GPU (or their bench command) and how to tune each."""
    if not waiting:
        return
    units = list(dict.fromkeys(task.unit for task in waiting))
    log(f"{len(units)} unit(s) not tuned here, they need a measurement:\n"
        + "\n".join(f"    {how_to_measure(unit)}" for unit in units)
        + "\n  (or tune their compiler facts here, registers and spills, with --backend static: "
          "not their speed)")
