"""One search of a retune, in three stages, each returning a typed value:

- `prepare` (retune.search.prepare): the space the build can reach, the
  backend, the evaluator resumed from the results store: `Prepared`;
- `search`: the baseline, then the engine until its Deadline or cap (stored
  evaluations of the space count), the baseline's drift after: `Searched`;
- `decide`: the ACF's selection rule, the backend's confirmation of the
  winner, the kernels of baseline and choice compared: `choice.Outcome`.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable

import numpy as np

from nvcc_evo.driver.toolkit import Toolkit
from nvcc_evo.engine import budget
from nvcc_evo.engine.bayes import Bayes
from nvcc_evo.engine.boosters import family_of
from nvcc_evo.engine.evolve import Budget, Engine, Progress, run_search
from nvcc_evo.engine.surrogate import Guide
from nvcc_evo.cubin.compile import CompileResult
from nvcc_evo.engine.space import Genome, SearchSpace, baseline_defines
from nvcc_evo.execute import learned
from nvcc_evo.execute.evaluate import Evaluator, Stopped
from nvcc_evo.execute.devices import calibrate
from nvcc_evo.execute.together import Together
from nvcc_evo.execute.warm import warm_starts
from nvcc_evo.measure import Measurement
from nvcc_evo.measure.backend import Backend
from nvcc_evo.retune.outcome.choice import (Outcome, Verification, choose, confirm, end_drift,
                                            front_chosen_from)
from nvcc_evo.kerneldiff.compare import after_search
from nvcc_evo.retune.scope.options import Searching
from nvcc_evo.retune.search.prepare import Prepared, Retune
from nvcc_evo.retune.search.progress import Board, Reporter, progress_line, reporter
from nvcc_evo.retune.scope.caps import reconfigure_safe
from nvcc_evo.retune.scope.reach import same_code, say
from nvcc_evo.retune.scope.staleness import stale_reasons
from nvcc_evo.retune.scope.tasks import Task
from nvcc_evo.retune.outcome.writeback import current_genome
from nvcc_evo.system.clock import Deadline
from nvcc_evo.system.say import log


@dataclass(frozen=True)
class Searched:
    """A search done (`search`): the baseline, the engine as it ended."""

    baseline: Genome
    baseline_measurement: Measurement
    engine: Engine
    progress: Progress
    settled: str           # why nothing is written: the entry is up to date ("" otherwise)
    drift: float | None    # the baseline's drift after the search, where the backend says one
    learned: str           # what refused launches taught (execute.learned)


# ---------------------------------------------------------------- search
def search(prepared: Prepared, retune: Retune, rng: np.random.Generator,
           together: Together | None = None) -> Searched:
    """The baseline (a failed one: nothing searched, said why), then the
    engine until the budget; the backend's drift of the baseline after it."""
    task, space, evaluator = prepared.task, prepared.space, prepared.evaluator
    measurer = prepared.measurer
    baseline = space.baseline()
    measured = evaluator.measured
    evaluator.keep_compile(baseline)
    baseline_measurement = measure_baseline(evaluator, measurer, baseline)
    # (a value whose binary cannot run is never searched; replay's answers compile nothing)
    if baseline_measurement.ok and measurer.compiles:
        space = prepared.space = _runnable(prepared, baseline)
    # never proposed: what the build would not take whole, what a refused launch teaches
    avoiding = learned.Avoiding(prepared.candidates.lost,
                                learned.limits_for(task.unit.bench, task.source, space, measured),
                                learned.shared_for(task.source, space, measured),
                                learned.wrong_for(task.source, space, measured))
    calibrate(prepared.lanes, measurer, baseline, prepared.candidates.job(baseline))
    measured.set_baseline(dict(baseline_measurement.metrics))
    history = measured.evaluations(space)          # (scored once the baseline is known)
    for evaluation in history:
        evaluator.offer_incumbent(evaluation.genome)
    known = warm_starts(retune.store, retune.project, measured.context, prepared.goal, space, log,
                        prepared.candidates.job(baseline))   # (its kernels, compiled if asked)
    search = retune.searching.search
    engine = Engine(space, rng, retune.searching.population, seeds=_seeds(task, space),
                    history=history, avoid=avoiding, warm=known,
                    guide=Guide() if search == "guided" else None,
                    bayes=Bayes() if search == "bayes" else None)
    drift = None
    # every candidate would fail the same way: say why, search nothing
    if not baseline_measurement.ok:
        log(f"{task}: the baseline (the build's own flags) failed, "
            f"{baseline_measurement.status}:\n" + _first_lines(baseline_measurement.detail))
        progress, settled = Progress(), ""
    else:
        progress, settled = _shown_search(prepared, retune.searching, retune.toolkit, engine,
                                          together)
        if progress.generation and measurer.end_drift is not None:
            drift = end_drift(task, measurer, baseline, baseline_measurement)
    say(task, same_code(space, measured.digests))
    return Searched(baseline, baseline_measurement, engine, progress, settled, drift,
                    learned.said(engine, avoiding))


def _runnable(prepared: Prepared, baseline: Genome) -> SearchSpace:
    """The space without the values whose binaries could not run, as the baseline's compile shows
    them (caps.reconfigure_safe), said once; the baseline's compile kept by the evaluator, else
    compiled again (read back from the store)."""
    kept = prepared.evaluator.kept_compile(baseline)

    def compiled() -> CompileResult:
        return kept if kept is not None else prepared.candidates.compiled(baseline)

    space, notes = reconfigure_safe(prepared.space, prepared.task.arch, compiled)
    say(prepared.task, notes)
    values = lambda of: {(d.knob, c) for d in of.dimensions for c in d.choices}
    prepared.unrunnable = frozenset(values(prepared.space) - values(space))
    return space


def measure_baseline(evaluator: Evaluator, measurer: Backend, genome: Genome) -> Measurement:
    """The baseline's measurement: read back from the store, or measured
    (always, before any candidate, for a backend that keeps what its run
    left: the GPU compares every candidate's outputs with the baseline's)."""
    if measurer.fresh_baseline:
        evaluator.measured.forget(genome)
    if genome not in evaluator.measured:
        evaluator([genome])
    return evaluator.measured[genome]


def _seeds(task: Task, space: SearchSpace) -> list[Genome]:
    """Baseline first, then the unit's current knobs, then its other
    targets'; a new unit (no entry for this architecture) also gets its
    kernel family's curated starting points (nvcc_evo.engine.boosters) that
    move a knob of its space."""
    seeds = [space.baseline()]
    current = [t for t in task.unit.targets if t.serves(task.arch)]
    others = [t for t in task.unit.targets if not t.serves(task.arch)]
    for target in current + others:
        seeds.append(space.genome({s.knob: s.value for s in target.settings}))
    family = None if current else family_of(task.source)
    boosted = [space.genome(dict(seed.knobs)) for seed in family.seeds] if family else []
    boosted = [g for g in dict.fromkeys(boosted) if g not in seeds]
    if boosted and family is not None:
        log(f"{task}: a new unit of the {family.name} family: {len(boosted)} curated starting "
            "point(s) seeded")
    return seeds + boosted


def _shown_search(prepared: Prepared, searching: Searching, toolkit: Toolkit, engine: Engine,
                  together: Together | None) -> tuple[Progress, str]:
    """The search with its progress shown (a bar or lines; a row of the
    searches' board when several run at once), moved per measured candidate."""
    task, evaluator, limits = prepared.task, prepared.evaluator, searching.limits
    measurer = prepared.measurer
    done = evaluator.measured.searched(prepared.space)
    board = together.board if together else None   # (a Board: searches at once on a terminal)
    shown: Reporter
    if isinstance(board, Board):
        shown = board.row(str(task), limits.evaluations, done)
    else:
        shown = reporter("lines" if together else searching.progress, str(task),
                         limits.evaluations, log, done=done)
    prepared.listeners.append(shown.advance)

    def report(progress: Progress, running: Engine, limit: Budget) -> None:
        shown.update(progress_line(str(task), prepared.goal, progress, running,
                                   evaluator.measured, measurer.drift, limit))

    try:
        # the search's one clock
        deadline = Deadline(prepared.started, limits.seconds, measurer.reserve())
        measurer.finish_by(deadline)
        return _search(task, searching, toolkit, engine, evaluator, prepared.space, report,
                       deadline, prepared.unrunnable)
    finally:
        prepared.listeners.clear()
        shown.close()


def _search(task: Task, searching: Searching, toolkit: Toolkit, engine: Engine,
            evaluator: Evaluator, space: SearchSpace,
            report: Callable[[Progress, Engine, Budget], None], deadline: Deadline,
            unrunnable: frozenset) -> tuple[Progress, str]:
    """Search until the budget is reached, counting the evaluations of this
    search space read back from the store (the baseline aside, as in a first
    run), so a rerun or a resumed run only reaches the budget. Returns the
    progress and, when there is nothing to search and the unit's entry is up
    to date, why nothing is to be written either ("" otherwise)."""
    limit = budget.budget_of(searching.limits, deadline, log=lambda said: log(f"{task}: {said}"))
    searched = evaluator.measured.searched(space)
    left = space.size - 1 - searched    # a space searched whole has none left, whatever the budget
    if searched < limit.evaluations and left > 0:
        overlap = searching.fast and evaluator.compiles
        evaluator.measure_until(deadline)          # no candidate measured past it
        try:
            return run_search(engine, evaluator, limit, lambda p, e: report(p, e, limit),
                              done=searched, overlap=overlap), ""
        finally:
            evaluator.close()                      # a batch compiling ahead when the search stopped
    reached = "the whole space" if left <= 0 else f"--evaluations {limit.evaluations}"
    within = (f"already within budget ({searched} evaluations of this search space stored besides "
              f"the baseline, {reached})")
    if not _entry_is_current(task, toolkit, searching.backend, unrunnable):
        log(f"{task}: {within}: nothing to search; its entry is not up to date: the choice is "
            "written")
        return Progress(), ""
    log(f"{task}: {within}: nothing to search; its entry is up to date: nothing to write")
    return Progress(), f"{within}; the entry is up to date, not rewritten"


def _entry_is_current(task: Task, toolkit: Toolkit, backend: str,
                      unrunnable: frozenset = frozenset()) -> bool:
    """The unit's entry for the task's architecture is up to date, was written by this backend (a
    static search never settles for a GPU's entry) and holds no value whose binary could not run
    (`unrunnable`)."""
    target = task.entry
    return (target is not None and target.backend == backend
            and not any((s.knob, s.value) in unrunnable for s in target.settings)
            and not stale_reasons(task.unit, task.arch, task.fingerprint, task.toolkit(toolkit),
                                  task.build, task.gpu, built_for=task.built_for))


def _first_lines(detail: str, count: int = 8) -> str:
    """The first lines of a tool's message, indented, for stderr."""
    lines = [line for line in detail.splitlines() if line.strip()][:count]
    return "\n".join(f"    {line}" for line in lines) or "    (no message)"


# ---------------------------------------------------------------- decide
def decide(prepared: Prepared, searched: Searched, retune: Retune,
           together: Together | None = None) -> Outcome:
    """The choice: the selection rule over the front and the baseline; an
    up-to-date entry stands (`settled`); else the backend's confirmation,
    where it has one, of a winner that is not the baseline. Then the lanes
    closed, the search's time, the kernels compared (kerneldiff.compare)."""
    task, space, evaluator = prepared.task, prepared.space, prepared.evaluator
    measurer = prepared.measurer
    measured = evaluator.measured
    base, current = searched.baseline_measurement, current_genome(task, space)
    seen, front_of_engine = list(searched.engine.seen.values()), searched.engine.front()
    at_baseline = measured.evaluation(searched.baseline, base)
    best = choose(seen, front_of_engine, at_baseline, prepared.goal, measured.measurements,
                  measured.baseline, current)
    chosen, chosen_measurement = best.genome, measured[best.genome]
    verification = Verification(None, "")
    # the ACF's entry stands (it may be a verified baseline): report it, not a new choice
    if searched.settled:
        if current is not None and current in measured:
            chosen, chosen_measurement = current, measured[current]
    elif measurer.confirm is not None and chosen != searched.baseline and base.ok:
        if together is not None and together.stopping.is_set():
            raise Stopped()
        verification = confirm(task, space.baseline(), chosen, measurer,
                               prepared.candidates.compiled)
        if verification.rejected:
            chosen, chosen_measurement = searched.baseline, base
    if prepared.lanes is not None:
        prepared.lanes.close()
    front = front_chosen_from(seen, front_of_engine, at_baseline, prepared.goal,
                              measured.measurements, measured.baseline, chosen)
    outcome = Outcome(task, prepared.goal, space, base, chosen, chosen_measurement, front,
                      measured, searched.progress, time.monotonic() - prepared.started,
                      prepared.candidates.fixed, measurer.hello, searched.settled,
                      verification.verdict, verification.rejected, searched.drift, searched.learned)
    measured.tally.stop()
    if base.ok:         # why the choice is faster, kernel by kernel (kerneldiff.compare)
        outcome.kernels = after_search(outcome, prepared.candidates.job, retune.store.path.parent,
                                       baseline_defines(task.source, space), log, evaluator.ptx,
                                       together.slots if together else None)
    return outcome
