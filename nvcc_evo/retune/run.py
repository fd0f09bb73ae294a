"""`nvcc-evo --retune`: one search per stale (unit, target), its choice
written back into the ACF.

What one retune does and the settings it runs with come from
nvcc_evo.retune.options; what is stale and how each unit is built from
nvcc_evo.retune.tasks; the choice and the backend's confirmation of it
from nvcc_evo.retune.choice; the write into the ACF (by identity, under its
lock) from nvcc_evo.retune.writeback. Here: resume from the results store up
to the budget, the search, the end report and exit status.
"""
from __future__ import annotations

import hashlib
import os
import time
from contextlib import nullcontext
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from nvcc_evo.driver import settings
from nvcc_evo.driver.cache import prune
from nvcc_evo.measure.candidate import PtxCache, compile_candidate
from nvcc_evo.driver.common import ACF_NAME
from nvcc_evo.driver.match.find import acf_problem, find_acf, untrusted_acf
from nvcc_evo.driver.toolkit import cache_folder_if_any
from nvcc_evo.acf.knobs import TOOLKIT_TOOL
from nvcc_evo.errors import AcfChanged, AcfError, EnvironmentProblem, ExitCode, UsageError
from nvcc_evo.measure import Measurement
from nvcc_evo.engine import budget, learned
from nvcc_evo.engine.boosters import family_of
from nvcc_evo.retune.choice import choose, confirm, end_drift
from nvcc_evo.execute.evaluate import Evaluator, Goal, Stopped, goal_for
from nvcc_evo.engine.evolve import Engine, Evaluation, Progress, run_search
from nvcc_evo.retune.kernels import after_search
from nvcc_evo.execute.cluster import open_cluster
from nvcc_evo.execute.measurers import (calibrate, check_benches, close_pool, gpu_arch, measuring,
                                       resolve_backend)
from nvcc_evo.retune.options import (Options, backend_resolved, ptxas_programs, real_nvcc, say_settings,
                                     with_settings)
from nvcc_evo.retune.progress import board_for, progress_line, reporter
from nvcc_evo.retune.reach import not_shipped, reachable, recorded_build, same_code, say, ship_check
from nvcc_evo.retune.tasks import Task, build_key, check_target, find_tasks, stale_reasons
from nvcc_evo.system.say import log
from nvcc_evo.engine.space import Genome, SearchSpace, baseline_defines, build_space
from nvcc_evo.retune.speedsafe import guard_for, guarded_goal, narrowed, say_waiting, set_aside
from nvcc_evo.execute.store import Context, Store
from nvcc_evo.execute.together import Together, how_many, run_together
from nvcc_evo.retune.writeback import (current_genome, fixed_settings, one_retune_at_a_time, say_rebuild,
                                      verdict_of, write_back)
from nvcc_evo.system.leftovers import sweep_for
from nvcc_evo.system.programs import said


@dataclass
class Outcome:
    task: Task
    goal: Goal
    space: SearchSpace
    baseline: Measurement
    chosen: Genome
    chosen_measurement: Measurement
    front: list[Evaluation]
    evaluator: Evaluator
    progress: Progress
    verdict: str = ""
    written: bool = False
    extra: dict = field(default_factory=dict)


# ---------------------------------------------------------------- one search
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
    if boosted:
        log(f"{task}: a new unit of the {family.name} family: {len(boosted)} curated starting point(s) seeded")
    return seeds + boosted


def tune(task: Task, options: Options, toolkit, store: Store, rng: np.random.Generator,
         acf_path: Path, cluster=None, together: Together | None = None) -> Outcome:
    """One search (`together`: what it shares with the searches running beside it, execute.together)."""
    started = time.monotonic()
    space = build_space(task.unit, task.source, toolkit.accepts)
    build = recorded_build(task, acf_path, toolkit, options)      # the compile plan the wrapper builds with
    space, fixed, left_out = reachable(task, space, fixed_settings(task, space), build)
    say(task, left_out)
    guard = guard_for(task.unit.tune, task.arch) if options.backend == "static" else None
    space = narrowed(space, guard) if guard else space      # registers and spills cannot rank speed
    programs = ptxas_programs(space, toolkit, acf_path, options, task.arch, fixed.get("ptxas.version"))

    def flags_for(genome: Genome) -> tuple[str, ...]:
        return build.step({**fixed, **genome.settings()})[0].flags
    at_baseline = space.baseline().settings()          # (a baseline value is the build's own: never lost)
    lost = lambda genome: not_shipped(build.step({**fixed, **genome.settings()})[0],
                                      {k: v for k, v in genome.settings().items() if at_baseline.get(k) != v})

    def program_for(genome: Genome) -> str | None:
        return programs.get(str({**fixed, **genome.settings()}.get("ptxas.version", TOOLKIT_TOOL)))

    job_for = lambda genome: replace(task.job, flags=flags_for(genome), ptxas=program_for(genome))

    context = Context(toolkit.version, task.fingerprint, task.arch, "cpu", options.backend, str(task.unit),
                      build_key(task.job, acf_path.parent))
    measurer, lanes = measuring(options, task, acf_path, context, baseline_defines(task.source, space), flags_for,
                                cluster)
    context = replace(context, device=measurer.device)
    if measurer.build:          # a bench command is part of how candidates are built: another one, other results
        context = replace(context, build=hashlib.sha256((context.build + measurer.build).encode()).hexdigest()[:16])
    goal = goal_for(task.unit.tune, measurer.objectives, measurer.primary, measurer.maximize)
    goal = guarded_goal(goal, guard) if guard else goal
    listeners = []               # told of each measured candidate: the progress bar, while it is shown

    def measure(genome: Genome, flags, result):
        measured = measurer.measure(genome, flags, result)
        for told in listeners:
            told()
        return measured

    evaluator = Evaluator(task.job, goal, context, store, flags_for, measure, measurer.compiles,
                          workers=options.jobs, program_for=program_for,
                          race=measurer.race if options.protocol == "fast" else None,
                          ptx=PtxCache() if options.protocol == "fast" else None,
                          slots=together.slots if together else None, stopping=together.stopping if together else None)
    evaluator.lanes, evaluator.not_shipped = lanes, lost
    if cluster is not None:                      # compiles on the cluster's CPUs
        evaluator.compiler = cluster.compiler(options.protocol == "fast")
    stored = _resume(task, store, context, evaluator, space, goal)
    # (said before the baseline is measured: a bench command's baseline runs take a while and say their own line)
    log(f"{task}: {', '.join(task.reasons)}; backend {measurer.describe}; {goal}; space {space.size} points, {len(space.dimensions)} knobs"
        + f"; {budget.describe(options)}" + (f"; resuming with {stored} stored evaluations" if stored else ""))
    baseline_genome = space.baseline()
    baseline_measurement = measure_baseline(evaluator, measurer, baseline_genome)
    limits = learned.limits_for(task, space, evaluator)      # what a refused launch teaches
    calibrate(lanes, measurer, baseline_genome, job_for(baseline_genome))
    evaluator.baseline = dict(baseline_measurement.metrics)
    history = [evaluator.evaluation(g, m) for g, m in evaluator.measured.items()]   # with baseline known
    for evaluation in history:
        evaluator.offer_incumbent(evaluator.measured[evaluation.genome], evaluation)
    engine = Engine(space, rng, options.population, seeds=_seeds(task, space), history=history,
                    avoid=limits)
    extra = {}
    if not baseline_measurement.ok:      # every candidate would fail the same way: say why, search nothing
        log(f"{task}: the baseline (the build's own flags) failed, {baseline_measurement.status}:\n"
            + _first_lines(baseline_measurement.detail))
        progress, settled = Progress(), ""
    else:
        done = _searched(evaluator, space)
        shown = together.board.row(str(task), options.evaluations, done) if together and together.board else \
            reporter("lines" if together else options.progress, str(task), options.evaluations, log, done=done)
        listeners.append(shown.advance)
        try:
            spent = budget.Spent(time.monotonic() - started, measurer.reserve())
            measurer.finish_by(started + budget.decided(options).seconds)
            progress, settled = _search(task, options, toolkit, engine, evaluator, space, lambda p, e, b: shown.update(
                progress_line(str(task), goal, p, e, evaluator, measurer.drift, b)), spent)
        finally:
            listeners.clear()
            shown.close()
        if progress.generation and measurer.end_drift is not None:
            end_drift(task, measurer, baseline_genome, baseline_measurement, extra)
    say(task, same_code(space, evaluator.digests))
    base_eval = evaluator.evaluation(baseline_genome, baseline_measurement)
    best = choose(list(engine.seen.values()), engine.front(), base_eval, goal, evaluator.measured,
                  evaluator.baseline, current_genome(task, space))
    outcome = Outcome(task, goal, space, baseline_measurement, best.genome, evaluator.measured[best.genome],
                      engine.front(), evaluator, progress,
                      extra={"measurer": measurer, "fixed": fixed, "left_out": left_out, "build": build,
                             "flags_for": flags_for, **extra, **learned.said(task, engine, limits)})
    if settled:          # the ACF's entry stands (it may be a verified baseline): report it, not a new choice
        outcome.extra["settled"] = settled
        current = current_genome(task, space)
        if current is not None and current in evaluator.measured:
            outcome.chosen, outcome.chosen_measurement = current, evaluator.measured[current]
    elif measurer.confirm is not None and best.genome != baseline_genome and baseline_measurement.ok:
        if together is not None and together.stopping.is_set():
            raise Stopped()
        confirm(outcome, measurer, lambda g: compile_candidate(job_for(g)))
    if lanes is not None:
        lanes.close()
    outcome.extra["seconds"] = time.monotonic() - started     # search and verification, this run
    evaluator.tally.stop()
    if baseline_measurement.ok:         # why the choice is faster, kernel by kernel (retune.kernels)
        after_search(outcome, job_for, store.path.parent, baseline_defines(task.source, space), log, evaluator.ptx,
                     together.slots if together else None)
    return outcome


def measure_baseline(evaluator: Evaluator, measurer, genome: Genome):
    """The baseline's measurement: read back from the store, or measured
    (always, before any candidate, for a backend that keeps what its run
    left: the GPU compares every candidate's outputs with the baseline's)."""
    if measurer.fresh_baseline:
        evaluator.forget(genome)
    if genome not in evaluator.measured:
        evaluator([genome])
    return evaluator.measured[genome]


def _resume(task: Task, store: Store, context: Context, evaluator: Evaluator, space: SearchSpace,
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
               and (not record.measurement.ok or all(m in dict(record.measurement.metrics) for m in goal.minimize))]
    if len(fitting) < len(mine):
        log(f"{task}: {len(mine) - len(fitting)} stored evaluation(s) of an earlier search space left aside")
    evaluator.resume(fitting)
    return len(fitting)


def _search(task: Task, options: Options, toolkit, engine: Engine, evaluator: Evaluator, space: SearchSpace,
            report, spent: budget.Spent = budget.Spent()) -> tuple[Progress, str]:
    """Search until the budget is reached, counting the evaluations of this
    search space read back from the store (the baseline aside, as in a first
    run), so a rerun or a resumed run only reaches the budget. Returns the
    progress and, when there is nothing to search and the unit's entry is up
    to date, why nothing is to be written either ("" otherwise)."""
    limit = budget.budget_of(options, spent, log=lambda said: log(f"{task}: {said}"))
    searched = _searched(evaluator, space)
    left = space.size - 1 - searched               # a space searched whole has nothing left, whatever the budget
    if searched < limit.evaluations and left > 0:
        overlap = options.protocol == "fast" and evaluator.compiles
        evaluator.deadline = time.monotonic() + limit.seconds      # no candidate measured past it
        try:
            return run_search(engine, evaluator, limit, lambda p, e: report(p, e, limit), done=searched,
                              overlap=overlap), ""
        finally:
            evaluator.close()                      # a batch compiling ahead when the search stopped
    reached = "the whole space" if left <= 0 else f"--evaluations {limit.evaluations}"
    within = f"already within budget ({searched} evaluations of this search space stored besides the baseline, " \
             f"{reached})"
    if not _entry_is_current(task, toolkit, options):
        log(f"{task}: {within}: nothing to search; its entry is not up to date: the choice is written")
        return Progress(), ""
    log(f"{task}: {within}: nothing to search; its entry is up to date: nothing to write")
    return Progress(), f"{within}; the entry is up to date, not rewritten"


def _searched(evaluator: Evaluator, space: SearchSpace) -> int:
    """Evaluations of this search space made so far, the baseline aside (the budget's count)."""
    return sum(1 for genome in evaluator.measured if genome in space and genome != space.baseline())


def _entry_is_current(task: Task, toolkit, options: Options) -> bool:
    """The unit's entry for the task's architecture is up to date and was
    written by this backend (a static search never settles for a GPU's entry)."""
    target = task.unit.entry_for(task.arch)
    return (target is not None and target.backend == options.backend
            and not stale_reasons(task.unit, task.arch, task.fingerprint, toolkit.version, task.build))


def _first_lines(detail: str, count: int = 8) -> str:
    """The first lines of a tool's message, indented, for stderr."""
    lines = [line for line in detail.splitlines() if line.strip()][:count]
    return "\n".join(f"    {line}" for line in lines) or "    (no message)"




def _write_or_say_why(acf_path: Path, outcome: Outcome, toolkit, options: Options) -> None:
    """Write the outcome; a unit the ACF no longer has as it was (or an ACF
    that does not parse now) is reported on stderr and in the summary."""
    try:
        shipped = ship_check(outcome, acf_path, toolkit, options, outcome.extra["build"],
                             outcome.extra["flags_for"](outcome.chosen)) if "build" in outcome.extra else ""
        if shipped:
            raise AcfChanged(f"ship check: {outcome.task.unit} [{outcome.task.arch}]: {shipped}")
        write_back(acf_path, outcome, toolkit, options)
        return
    except AcfChanged as problem:
        reason = str(problem)
    except AcfError as problem:          # saved mid-edit, say
        reason = f"the ACF has errors now:\n{problem}"
    except FileNotFoundError:
        reason = f"{acf_path} is gone"
    except OSError as problem:           # a full disk: the other units go on, the table is printed, exit 3
        reason = f"cannot write the ACF {acf_path}: {problem.strerror or problem}"
        outcome.extra["cannot_write"] = True
    outcome.extra["not_written"] = reason
    outcome.verdict += f"; NOT written: {reason}"
    log(f"{outcome.task}: not written to the ACF: {reason} (its evaluations are kept in the results store)")


# ---------------------------------------------------------------- entry point
def run_retune(options: Options) -> int:
    from nvcc_evo.acf.resolve import load
    from nvcc_evo.driver.toolkit import load_toolkit
    from nvcc_evo.retune.summary import render
    named = [Path.cwd() / g for g in options.globs if (Path.cwd() / g).is_file()]   # as a build finds it: from the file
    acf_path = Path(options.acf).resolve() if options.acf else find_acf([p.parent for p in named] + [Path.cwd()],
                                                                       os.environ)
    if acf_path is None:
        raise UsageError(f"no {ACF_NAME} here or above; name one with --acf")
    problem = (not options.acf and untrusted_acf(acf_path, os.environ)) or acf_problem(acf_path, os.environ)
    if problem:           # another user's ACF; a folder, a FIFO, a link loop of that name
        raise EnvironmentProblem(problem)
    project = settings.load(acf_path, os.environ)
    if project.ignored:
        log(f"warning: {project.ignored}; the retune goes on without them")
    options = with_settings(options, project)
    cache = cache_folder_if_any()   # (none where a link or a file is in its place)
    if cache is not None:
        prune(cache)                # the cache folder kept bounded (driver.cache)
    swept = sweep_for(acf_path)
    if swept:
        log(f"removed {len(swept)} folder(s) and file(s) that killed runs left: {', '.join(swept)}")
    toolkit = load_toolkit(real_nvcc(project))
    check_target(options.target, toolkit, dict(options.sources).get("retune.target", "--target"))
    held = one_retune_at_a_time(acf_path, options.dry_run, log)
    cluster = None
    try:
        file = load(acf_path)
        cluster = open_cluster(options.cluster, options.dry_run)
        auto = options.backend == "auto"
        options = budget.decided(backend_resolved(options, resolve_backend(options.backend, cluster)))
        if options.backend == "pycuda" and options.target is None and not options.dry_run:
            options = replace(options, target=gpu_arch(options.device, cluster))   # what this GPU runs
        log(f"{acf_path}: {toolkit}; backend {options.backend}"
            + (" (no GPU timing: registers, spills and other compiler facts are the objectives)"
               if options.backend == "static" else ""))
        say_settings(project, options)
        tasks, skipped, kept = find_tasks(file, acf_path, toolkit, options)
        tasks, waiting = set_aside(tasks, log) if auto and options.backend == "static" else (tasks, [])
        if not options.dry_run:          # (a dry run lists what is stale, whatever would measure it)
            check_benches(tasks, options.backend)
        if not tasks:
            log(f"nothing retuned: {len(skipped)} skipped, as said above" if skipped else
                "nothing retuned: what is stale needs a measurement" if waiting else
                "nothing to retune: every unit and target is up to date"
                + (f" ({kept} kept for a GPU, as said above)" if kept else "") + " (use --all to force)")
            say_waiting(waiting, log)
            return ExitCode.INVALID_INPUT if skipped else ExitCode.OK
        if options.dry_run:
            for task in tasks:
                print(f"{task}: {'; '.join(task.reasons)}")
            log(f"{len(tasks)} to retune (dry run: nothing tuned)" + (f"; {len(skipped)} skipped" if skipped else ""))
            log(f"programs run: {said()}")
            return ExitCode.INVALID_INPUT if skipped else ExitCode.OK
        store = Store(acf_path.parent / ".nvcc-evo" / "results.jsonl")
        store.read()
        if store.skipped:
            log(f"{store.skipped} line(s) of the results store {store.path} skipped (cut short, or not results of "
                "this version's shape)")
        outcomes = _retune_all(tasks, options, toolkit, store, acf_path, cluster)
    finally:
        close_pool()
        if cluster is not None:
            cluster.close()
        held.close()
    print(render(outcomes), end="")
    say_rebuild(acf_path, outcomes, redated=options.backend == "command")
    say_waiting(waiting, log)
    return _exit_status(outcomes, skipped)


def _exit_status(outcomes: list[Outcome], skipped: list[str]) -> int:
    """A retune that could not build (or even find) some unit must not look finished."""
    failed = [str(o.task) for o in outcomes if not o.baseline.ok]
    if failed:
        log(f"{len(failed)} of {len(outcomes)} not tuned, their baseline failed: {', '.join(failed)} (see above)")
    if skipped:
        log(f"{len(skipped)} skipped before the search: {', '.join(skipped)} (see above)")
    not_written = any("not_written" in o.extra for o in outcomes)     # the ACF changed under the retune (said above)
    if any("cannot_write" in o.extra for o in outcomes):
        return ExitCode.ENVIRONMENT
    return ExitCode.INVALID_INPUT if failed or skipped or not_written else ExitCode.OK


def _retune_all(tasks: list[Task], options: Options, toolkit, store: Store, acf_path: Path,
                cluster=None) -> list[Outcome]:
    """Every task's search and choice, one after another or several at once (execute.together)."""
    count = how_many(options.at_once, len(tasks), options.backend, options.population, cluster, log)

    def one(task: Task, together: Together | None = None) -> Outcome:
        outcome = tune(task, options, toolkit, store, np.random.default_rng(options.seed), acf_path, cluster,
                       together)
        outcome.verdict = verdict_of(outcome)
        if outcome.baseline.ok and "settled" not in outcome.extra:
            with together.writing if together else nullcontext():     # one write into the ACF at a time
                if together is not None and together.stopping.is_set():
                    raise Stopped()
                with together.slots if together else nullcontext():    # (the ship check compiles)
                    _write_or_say_why(acf_path, outcome, toolkit, options)
        return outcome

    try:
        if count > 1:
            shared = f"the cluster's {cluster.workers} CPUs" if cluster is not None else \
                f"{options.jobs or os.cpu_count()} slots"
            log(f"{len(tasks)} searches, {count} at once (compiles sharing {shared}; one candidate at a time on "
                "each GPU)")
            board = board_for(options.progress, log)     # a bar each, on a terminal
            try:
                return run_together(tasks, count, options.jobs, one, board)
            finally:
                if board is not None:
                    board.close()
        return [one(task) for task in tasks]
    except KeyboardInterrupt:
        log(f"interrupted: every finished evaluation is kept in {store.path}; "
            "the same command resumes from there")
        raise
