"""The first stage of a search of a retune (`prepare`): the space the build can
reach, how each genome is built (`Candidates`), the backend and its lanes,
the goal, and the evaluator, built complete by one factory (`evaluator_for`)
and resumed from the results store: `Prepared`.

What every search of one retune shares (what it is prepared with and what its
engine is asked, each made once from the decided options; the toolkit, results
store, the ACF's path, the cluster, the project's stores) travels as one
`Retune`; what the searches at once share, as `Together`.
"""
from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable

from nvcc_evo.acf.knobs import TOOLKIT_TOOL
from nvcc_evo.cubin.compile import CompileJob, CompileResult, PtxCache, compile_candidate
from nvcc_evo.driver.match.builds import build_key
from nvcc_evo.driver.toolkit import Toolkit
from nvcc_evo.engine.space import Genome, SearchSpace, baseline_defines, build_space
from nvcc_evo.execute.cluster import Cluster
from nvcc_evo.execute.evaluate import Builds, Compiling, Evaluator
from nvcc_evo.execute.goal import Goal, goal_for
from nvcc_evo.execute.lanes import LaneSet
from nvcc_evo.execute.measured import Measured
from nvcc_evo.execute.devices import measuring
from nvcc_evo.execute.store import Context, Store
from nvcc_evo.execute.together import Together
from nvcc_evo.execute.warm import ProjectStores
from nvcc_evo.measure import Measurement
from nvcc_evo.measure.backend import Backend
from nvcc_evo.retune.outcome.writeback import fixed_settings
from nvcc_evo.retune.scope.options import Preparing, Searching, ptxas_programs
from nvcc_evo.retune.scope.caps import link_safe
from nvcc_evo.retune.scope.reach import BuildStep, not_shipped, reachable, recorded_build, say
from nvcc_evo.retune.scope.tasks import Task
from nvcc_evo.retune.search.speedsafe import guarded_goal, narrowed, search_guard
from nvcc_evo.system.say import log


@dataclass(frozen=True)
class Retune:
    """What every search of one retune shares: what `prepare` needs (`preparing`), what the
    search asks of its engine (`searching`), both made once from the retune's Options
    (`project`: where it finds similar units', execute.warm)."""

    preparing: Preparing
    searching: Searching
    toolkit: Toolkit
    store: Store
    acf_path: Path
    cluster: Cluster | None = None
    project: ProjectStores | None = None


@dataclass(frozen=True)
class Candidates:
    """How a genome of the space is built: the recorded build's flags with
    the genome's values and the fixed settings (`fixed`: knobs outside the
    space the build passes), the ptxas it runs (`programs`: by ptxas.version),
    and why its knobs would not all reach the build ("" when they do)."""

    task: Task
    build: BuildStep
    fixed: dict
    programs: dict
    at_baseline: dict                    # the baseline's values: the build's own, never lost

    def settings(self, genome: Genome) -> dict:
        return {**self.fixed, **genome.settings()}

    def flags(self, genome: Genome) -> tuple[str, ...]:
        return self.build.step(self.settings(genome))[0].flags

    def program(self, genome: Genome) -> str | None:
        return self.programs.get(str(self.settings(genome).get("ptxas.version", TOOLKIT_TOOL)))

    def job(self, genome: Genome) -> CompileJob:
        return replace(self.task.job, flags=self.flags(genome), ptxas=self.program(genome))

    def lost(self, genome: Genome) -> str:
        moved = {k: v for k, v in genome.settings().items() if self.at_baseline.get(k) != v}
        return not_shipped(self.build.step(self.settings(genome))[0], moved)

    def compiled(self, genome: Genome) -> CompileResult:
        return compile_candidate(self.job(genome))


@dataclass
class Prepared:
    """A search made ready (`prepare`)."""

    task: Task
    started: float         # time.monotonic() once its backend was ready (the unit's time)
    space: SearchSpace
    candidates: Candidates
    measurer: Backend
    lanes: LaneSet | None
    goal: Goal
    evaluator: Evaluator
    # told of each measured candidate
    listeners: list[Callable[[], None]] = field(default_factory=list)
    # (knob, value) left out after the baseline: its binary could not run
    unrunnable: frozenset = frozenset()


# ---------------------------------------------------------------- prepare
def prepare(task: Task, retune: Retune, together: Together | None = None) -> Prepared:
    """The space the build can reach, the backend, the evaluator resumed
    from the store (`together`: what it shares with the searches beside it)."""
    preparing, toolkit = retune.preparing, retune.toolkit
    backend = preparing.measuring.backend
    space = build_space(task.unit, task.source, toolkit.accepts)
    # the plan the wrapper builds with
    build = recorded_build(task, retune.acf_path, toolkit, preparing.ptxas.paths)
    space, fixed, left_out = reachable(task, space, fixed_settings(task, space), build)
    say(task, left_out)
    guard = search_guard(task.unit.tune, task.arch, backend)
    space = narrowed(space, guard) if guard else space   # registers and spills cannot rank speed
    programs = ptxas_programs(space, toolkit, retune.acf_path, preparing.ptxas, backend,
                              task.arch, fixed.get("ptxas.version"))
    candidates = Candidates(task, build, fixed, programs, space.baseline().settings())
    space, unlinkable = link_safe(space, build, lambda: candidates.compiled(space.baseline()))
    say(task, unlinkable)
    context = Context(task.toolkit(toolkit), task.fingerprint, task.arch, "cpu", backend,
                      str(task.unit), build_key(task.job, retune.acf_path.parent))
    measurer, lanes = measuring(preparing.measuring, task, retune.acf_path, context,
                                baseline_defines(task.source, space), candidates.flags,
                                retune.cluster)
    # the unit's time starts with its backend ready: the GPU's measuring process starts once for the
    # whole retune (about 5 s on the H200), a cost no one search's budget pays
    started = time.monotonic()
    context = replace(context, device=measurer.device)
    # a bench command is part of how candidates are built: another one, other results
    if measurer.build:
        built = hashlib.sha256((context.build + measurer.build).encode()).hexdigest()[:16]
        context = replace(context, build=built)
    goal = goal_for(task.unit.tune, measurer.objectives, measurer.primary, measurer.maximize)
    goal = guarded_goal(goal, guard) if guard else goal
    listeners: list[Callable[[], None]] = []
    evaluator = evaluator_for(retune, task, Measured(goal, context), candidates, measurer, lanes,
                              listeners, together)
    stored = _resume(task, retune.store, context, evaluator.measured, space, goal)
    # (said before the baseline is measured: a bench command's baseline runs take a while and say
    # their own line)
    log(f"{task}: {', '.join(map(str, task.reasons))}; backend {measurer.describe}; {goal}; "
        f"space {space.size} points, {len(space.dimensions)} knobs; {preparing.budget}"
        + (f"; resuming with {stored} stored evaluations" if stored else ""))
    return Prepared(task, started, space, candidates, measurer, lanes, goal, evaluator, listeners)


def evaluator_for(retune: Retune, task: Task, measured: Measured, candidates: Candidates,
                  measurer: Backend, lanes: LaneSet | None, listeners: list[Callable[[], None]],
                  together: Together | None = None) -> Evaluator:
    """The search's Evaluator, complete, writing into `measured`: the backend's
    measure (each measured candidate told to `listeners`), its racing and PTX
    reuse in the fast protocol, the lanes, the compile pool (the cluster's
    CPUs with one), the compile slots and stop event it shares, the
    not-shipped check."""
    # the fast protocol: slower candidates raced out, PTX reused
    jobs, fast = retune.preparing.jobs, not retune.preparing.measuring.full

    def measure(genome: Genome, flags: tuple[str, ...],
                result: CompileResult | None) -> Measurement:
        measurement = measurer.measure(genome, flags, result)
        for told in listeners:
            told()
        return measurement

    compiling = Compiling(jobs, PtxCache() if fast else None,
                          retune.cluster.compiler(fast) if retune.cluster is not None else None,
                          together.slots if together else None) if measurer.compiles else None
    builds = Builds(task.job, candidates.flags, candidates.program, candidates.lost)
    return Evaluator(measured, retune.store, builds, measure, compiling=compiling,
                     race=measurer.race if fast else None, lanes=lanes,
                     stopping=together.stopping if together else None)


def _resume(task: Task, store: Store, context: Context, measured: Measured, space: SearchSpace,
            goal: Goal) -> int:
    """Read back this context's evaluations of the current search space from
    the store; how many. (Genomes of an earlier space, before an edit of the
    search block, are not points of this one: the operators cannot use them;
    a measurement without an objective the goal has now is measured again.)"""
    mine, others = store.for_context(context)
    others = [c for c in others if c.unit == context.unit and c.arch == context.arch]
    if others:
        log(f"{task}: {len(others)} other context(s) in the results store left aside "
            f"(e.g. {'; '.join(context.differences(others[0]))})")
    fitting = [record for record in mine if record.genome in space
               and (not record.measurement.ok
                    or all(m in dict(record.measurement.metrics) for m in goal.minimize))]
    if len(fitting) < len(mine):
        log(f"{task}: {len(mine) - len(fitting)} stored evaluation(s) of an earlier search space "
            "left aside")
    measured.resume(fitting)
    return len(fitting)


