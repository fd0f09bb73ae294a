"""The choice of a retune: the ACF's selection rule over the front and the
baseline (`choose`), then the backend's word on it: its confirmation of the
winner against the baseline (`confirm`), and the baseline's drift once the
search is over (`end_drift`), where the backend has them.

An outcome (nvcc_evo.retune.run's Outcome) is changed in place: what the
confirmation found goes into its `extra` (`stats`, `rejected`), and a
rejected winner gives way to the baseline.
"""
from __future__ import annotations

from nvcc_evo.measure import Measurement
from nvcc_evo.measure.backend import Backend
from nvcc_evo.execute.evaluate import Goal, holds
from nvcc_evo.engine.evolve import Evaluation
from nvcc_evo.retune.tasks import Task
from nvcc_evo.system.say import log
from nvcc_evo.engine.space import Genome


def choose(evaluations: list[Evaluation], front: list[Evaluation], baseline: Evaluation, goal: Goal,
           measured: dict, base: dict, current: Genome | None = None) -> Evaluation:
    """The ACF's selection rule over the front and the baseline: the lowest
    `select` objective among points meeting `where`, ties by the others."""
    index = goal.minimize.index(goal.select)
    on_front = {e.objectives for e in front}
    pool = [e for e in evaluations if e.feasible and e.objectives in on_front] + [baseline]
    pool = [e for e in pool if e.feasible]
    pool = [e for e in pool if all(holds(c, dict(measured[e.genome].metrics), base) == 0 for c in goal.select_where)]
    if not pool:
        return baseline
    base = dict(baseline.genome.items)
    changed = lambda e: sum(value != base.get(knob) for knob, value in e.genome.items)
    # Equal scores: the unit's current entry (a rerun never swaps it for an equal one), then the fewest
    # knobs moved from the baseline (the smallest change that does it), then one fixed order, so that the
    # order evaluations come back from the store in changes nothing.
    return min(pool, key=lambda e: (e.objectives[index], e.objectives, e.genome != current, changed(e),
                                    repr(e.genome.items)))


def confirm(outcome, measurer: Backend, build) -> None:
    """The backend's confirmation step on the winner and the baseline
    (`build`: a genome compiled as the search compiles it, for a backend
    that measures its own builds); a gain that is not significant, or a
    problem the backend found (in its own words), keeps the baseline."""
    task, baseline = outcome.task, outcome.space.baseline()
    found = measurer.confirm(baseline, outcome.chosen, build)
    if found.verdict is not None:
        outcome.extra["stats"] = found.verdict
        log(f"{task}: verification {found.verdict}" + (f"; {found.problem}" if found.problem else ""))
    elif found.problem:
        log(f"{task}: no verification: {found.problem}")
    if found.problem:
        outcome.extra["rejected"] = found.problem
    elif found.verdict is None or not found.verdict.significant:
        outcome.extra["rejected"] = f"gain not significant ({found.verdict or 'no verdict'})"
    if "rejected" in outcome.extra:
        outcome.chosen, outcome.chosen_measurement = baseline, outcome.baseline


def end_drift(task: Task, measurer: Backend, genome: Genome, first: Measurement, extra: dict) -> None:
    """The backend's baseline run again once the search is over (where that
    is too slow to do between generations): its drift, said and kept."""
    change = measurer.end_drift(genome, first)
    if change is not None:
        extra["drift"] = change
        log(f"{task}: baseline drift {change:+.2%} (the baseline built and run again after the search, "
            f"against its first runs)")
