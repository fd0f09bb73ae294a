"""The choice of a retune: the ACF's selection rule over the front and the
baseline (`choose`), then the backend's word on it: its confirmation of the
winner against the baseline (`confirm`: a `Verification`), and the
baseline's drift once the search is over (`end_drift`), where the backend
has them.

`Outcome` is what one search ends with (retune.search.tune's decide stage):
the choice and every fact the write into the ACF (retune.outcome.writeback)
and the end-of-retune table (retune.outcome.summary) read, each a typed
field.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping, NamedTuple

from nvcc_evo.measure import Measurement
from nvcc_evo.measure.backend import Backend
from nvcc_evo.measure.stats import Verdict
from nvcc_evo.execute.measured import Measured
from nvcc_evo.execute.goal import Goal, holds
from nvcc_evo.engine.evolve import Evaluation, Progress
from nvcc_evo.kerneldiff.compare import Comparison
from nvcc_evo.retune.scope.tasks import Task
from nvcc_evo.system.say import log
from nvcc_evo.engine.space import Genome, SearchSpace


@dataclass
class Outcome:
    """One search's end: the choice (a rejected winner gives way to the
    baseline) and what it rests on."""

    task: Task
    goal: Goal
    space: SearchSpace
    baseline: Measurement
    chosen: Genome
    chosen_measurement: Measurement
    front: list[Evaluation]
    measured: Measured                  # what the search measured (tally, the baseline's metrics)
    progress: Progress
    seconds: float                      # search and verification, this run
    fixed: dict                         # knobs outside the space the build passes: written too
    hello: dict | None = None           # the GPU measured on (name, cc, driver), for the provenance
    settled: str = ""                   # why the ACF's entry stands, not rewritten ("": it may be)
    verification: Verdict | None = None  # the backend's confirmation of the winner
    rejected: str = ""                  # why the baseline was kept over the winner ("": it was not)
    drift: float | None = None          # the baseline's drift after the search (command backend)
    learned: str = ""                   # what refused launches taught the engine (execute.learned)
    # baseline and choice compared kernel by kernel (kerneldiff.compare)
    kernels: Comparison | None = None
    verdict: str = ""                       # the choice in words (writeback.verdict_of)
    written: bool = False
    not_written: str | None = None          # why the choice was not written into the ACF
    cannot_write: bool = False              # ... because the ACF could not be written (exit 3)


class Verification(NamedTuple):
    """The backend's confirmation of a winner: its verdict (None where it
    never got that far) and why the baseline stays ("" when the winner does)."""

    verdict: Verdict | None
    rejected: str


def choose(evaluations: list[Evaluation], front: list[Evaluation], baseline: Evaluation,
           goal: Goal, measured: Mapping[Genome, Measurement], base: Mapping[str, float],
           current: Genome | None = None) -> Evaluation:
    """The ACF's selection rule over the front and the baseline: the lowest
    `select` objective among points meeting `where`, ties by the others."""
    index = goal.minimize.index(goal.select)
    pool = _pool(evaluations, front, baseline, goal, measured, base)
    if not pool:
        return baseline
    baseline_items = dict(baseline.genome.items)
    changed = lambda e: sum(value != baseline_items.get(knob) for knob, value in e.genome.items)
    # Equal scores: the unit's current entry (a rerun never swaps it for an equal one), then the
    # fewest knobs moved from the baseline (the smallest change that does it), then one fixed order,
    # so that the order evaluations come back from the store in changes nothing.
    return min(pool, key=lambda e: (e.objectives[index], e.objectives, e.genome != current,
                                    changed(e), repr(e.genome.items)))


def _pool(evaluations: list[Evaluation], front: list[Evaluation], baseline: Evaluation,
          goal: Goal, measured: Mapping[Genome, Measurement],
          base: Mapping[str, float]) -> list[Evaluation]:
    """What the choice is made among: the feasible points scoring as a front point does, and the
    baseline, those that meet the select rule's `where`."""
    on_front = {e.objectives for e in front}
    pool = [e for e in evaluations if e.feasible and e.objectives in on_front] + [baseline]
    pool = [e for e in pool if e.feasible]

    def meets(e: Evaluation) -> bool:
        return all(holds(c, dict(measured[e.genome].metrics), base) == 0
                   for c in goal.select_where)

    return [e for e in pool if meets(e)]


def front_chosen_from(evaluations: list[Evaluation], front: list[Evaluation],
                      baseline: Evaluation, goal: Goal, measured: Mapping[Genome, Measurement],
                      base: Mapping[str, float], chosen: Genome) -> list[Evaluation]:
    """The Pareto front the choice was made from, as the summary prints it: the points of
    `choose`'s pool that no other point of it dominates, one per scores (the chosen point on its
    own), sorted; the engine's front alone can hold a twin of the chosen point and leave out the
    baseline it was chosen over."""
    pool = _pool(evaluations, front, baseline, goal, measured, base)

    def dominated(e: Evaluation) -> bool:
        return any(all(a <= b for a, b in zip(o.objectives, e.objectives))
                   and o.objectives != e.objectives for o in pool)

    shown: dict = {}
    for e in sorted(pool, key=lambda e: (e.genome != chosen, repr(e.genome.items))):
        if not dominated(e):
            shown.setdefault(e.objectives, e)
    return sorted(shown.values(), key=lambda e: e.objectives)


def confirm(task: Task, baseline: Genome, chosen: Genome, measurer: Backend,
            build: Callable) -> Verification:
    """The backend's confirmation step on the winner and the baseline
    (`build`: a genome compiled as the search compiles it, for a backend
    that measures its own builds); a gain that is not significant, or a
    problem the backend found (in its own words), keeps the baseline."""
    assert measurer.confirm is not None        # (asked only of a backend that confirms)
    found = measurer.confirm(baseline, chosen, build)
    tried = " ".join(f"{k}={v}" for (k, v), (_, was) in zip(chosen.items, baseline.items)
                     if v != was)
    # (which candidate: a kept baseline's summary shows only the defaults)
    if found.verdict is not None:
        log(f"{task}: verification of {tried or 'the baseline'} against the baseline: "
            f"{found.verdict}" + (f"; {found.problem}" if found.problem else ""))
    elif found.problem:
        log(f"{task}: no verification: {found.problem}")
    if found.problem:
        return Verification(found.verdict, found.problem)
    if found.verdict is None or not found.verdict.significant:
        said = found.verdict or "no verdict"
        return Verification(found.verdict, f"gain not significant ({said})")
    return Verification(found.verdict, "")


def end_drift(task: Task, measurer: Backend, genome: Genome, first: Measurement) -> float | None:
    """The backend's baseline run again once the search is over (where that
    is too slow to do between generations): its drift, said; None where it
    has none to say."""
    assert measurer.end_drift is not None      # (asked only of a backend that has it)
    change = measurer.end_drift(genome, first)
    if change is not None:
        log(f"{task}: baseline drift {change:+.2%} (the baseline built and run again after the "
            "search, against its first runs)")
    return change
