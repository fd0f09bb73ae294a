"""`nvcc-evo --retune`: find what is stale, search, write the ACF back.

A (unit, target) is retuned when it has no entry, when its source, toolkit or
build changed since its provenance was written, or when asked (`--all`, unit
globs). Each is rebuilt as the build does (compile database) or, for a unit
never built through the wrapper, as `nvcc -c SOURCE`. The chosen point goes
into the unit's target block with provenance; every other byte stays.
"""
from __future__ import annotations

import fnmatch
import hashlib
import os
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from nvcc_evo import acf, compiledb
from nvcc_evo.compile import CompileJob
from nvcc_evo.errors import ExitCode, UsageError
from nvcc_evo.evaluate import Evaluator, Goal, goal_for, holds
from nvcc_evo.evolve import Budget, Engine, Evaluation, Progress, run_search
from nvcc_evo.flags import plan_flags, read_facts
from nvcc_evo.leftovers import sweep_for
from nvcc_evo.measure import Measurement
from nvcc_evo.measure.choose import close_pool, measurer_for, resolve_backend
from nvcc_evo.nvcc_options import parse_call
from nvcc_evo.plan import ACF_NAME, fingerprint, find_acf
from nvcc_evo.space import Genome, SearchSpace, baseline_defines, build_space, unit_sources
from nvcc_evo.store import Context, Store

DEFAULT_ARCH = "sm_90"


@dataclass(frozen=True)
class Options:
    acf: str | None = None
    globs: tuple[str, ...] = ()
    target: str | None = None
    all: bool = False
    backend: str = "auto"
    evaluations: int = 60
    generations: int = 1000
    seconds: float = float("inf")
    patience: int = 4
    population: int = 12
    seed: int = 0
    jobs: int | None = None
    timeout: float = 300.0
    replay: str | None = None
    dry_run: bool = False


@dataclass(frozen=True)
class Task:
    unit_index: int
    unit: acf.Unit
    arch: str
    source: Path
    job: CompileJob
    fingerprint: str
    reasons: tuple[str, ...]

    def __str__(self) -> str:
        return f"{self.unit} [{self.arch}]"


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


def log(message: str) -> None:
    print(f"nvcc-evo: {message}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------- what to tune
def _job_for(unit_index: int, unit: acf.Unit, arch: str, acf_path: Path, records, nvcc: str,
             timeout: float) -> tuple[CompileJob, Path] | None:
    """How the build compiles this unit: its latest compile-database entry, or `-c SOURCE`."""
    mine = [r for r in records if r.unit_index == unit_index and tuple(r.unit_globs) == unit.globs]
    if mine:
        record = max(mine, key=lambda r: (r.arch == arch, r.time))
        token = next((a for a in record.argv if os.path.abspath(os.path.join(record.cwd, a)) == record.input),
                     record.input)
        env = tuple((k, v) for k, v in record.env.items() if k.startswith("NVCC_") and "EVO" not in k)
        return CompileJob(nvcc, tuple(record.argv), record.cwd, token, arch, (), env, timeout), Path(record.input)
    files = unit_sources(unit, acf_path.parent)
    if not files:
        return None
    source = files[0]
    return CompileJob(nvcc, ("-c", str(source)), str(acf_path.parent), str(source), arch, (), (), timeout), source


def _stale_reasons(unit: acf.Unit, arch: str, print_: str, toolkit_version: str) -> tuple[str, ...]:
    target = unit.find_target(arch) or next((t for t in unit.targets if t.arch == arch), None)
    if target is None:
        return (f"no entry for {arch}",)
    if target.provenance is None:
        return ("never tuned (no provenance)",)
    reasons = []
    recorded = target.record("fingerprint")
    if recorded is None or recorded.value != print_:
        reasons.append("source changed")
    toolkit = target.record("toolkit")
    if toolkit is None or toolkit.value != toolkit_version:
        reasons.append(f"toolkit {toolkit.value if toolkit else '?'} -> {toolkit_version}")
    return tuple(reasons)


def find_tasks(file: acf.AcfFile, acf_path: Path, toolkit, options: Options) -> list[Task]:
    records = compiledb.read_all(acf_path)
    tasks = []
    for index, unit in enumerate(file.units):
        asked = options.all or any(fnmatch.fnmatchcase(g, pattern) for g in unit.globs for pattern in options.globs)
        if options.globs and not asked:
            continue
        archs = [options.target] if options.target else sorted(
            {r.arch for r in records if r.unit_index == index} | {t.arch for t in unit.targets}) or [DEFAULT_ARCH]
        for arch in archs:
            found = _job_for(index, unit, arch, acf_path, records, toolkit.nvcc, options.timeout)
            if found is None:
                log(f"unit {unit}: no source file matches it under {acf_path.parent}; skipped")
                continue
            job, source = found
            includes = parse_call(list(job.argv), {}).values("--include-path")
            print_ = fingerprint(source, [os.path.join(job.cwd, d) for d in includes])
            reasons = ("asked",) if asked else _stale_reasons(unit, arch, print_, toolkit.version)
            measured = None if asked else _measured_on(unit, arch)
            if reasons and options.backend == "static" and measured:
                log(f"{unit} [{arch}]: {'; '.join(reasons)}, but its entry was measured ({measured}); static "
                    f"objectives cannot judge runtime, so it stays until a retune on a GPU (name the unit or "
                    f"use --all to overwrite it anyway)")
                continue
            if reasons:
                tasks.append(Task(index, unit, arch, source, job, print_, reasons))
    return tasks


MEASURING_BACKENDS = ("pycuda", "command")


def _measured_on(unit: acf.Unit, arch: str) -> str | None:
    """Where the unit's current entry for `arch` was measured (runtime, not
    compiler facts), or None."""
    target = next((t for t in unit.targets if t.arch == arch), None)
    backend = target.record("backend") if target is not None and target.provenance else None
    if backend is None or backend.value not in MEASURING_BACKENDS:
        return None
    gpu, date = target.record("gpu"), target.record("date")
    return f"backend {backend.value}" + (f" on {gpu.value}" if gpu else "") + (f", {date.value}" if date else "")


# ---------------------------------------------------------------- one search
def _seeds(task: Task, space: SearchSpace) -> list[Genome]:
    """Baseline first, then the unit's current knobs, then its other targets'."""
    seeds = [space.baseline()]
    current = [t for t in task.unit.targets if t.arch == task.arch]
    others = [t for t in task.unit.targets if t.arch != task.arch]
    for target in current + others:
        seeds.append(space.genome({s.knob: s.value for s in target.settings}))
    return seeds


def _fixed_settings(task: Task, space: SearchSpace) -> dict:
    """Knobs set in the current target but outside the search space stay set."""
    searched = {d.knob for d in space.dimensions}
    current = next((t for t in task.unit.targets if t.arch == task.arch), None)
    return {s.knob: s.value for s in (current.settings if current else ()) if s.knob not in searched}


def choose(evaluations: list[Evaluation], front: list[Evaluation], baseline: Evaluation, goal: Goal,
           measured: dict, base: dict) -> Evaluation:
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
    # Equal scores: the fewest knobs moved from the baseline (the smallest change that does it).
    return min(pool, key=lambda e: (e.objectives[index], e.objectives, changed(e)))


def tune(task: Task, options: Options, toolkit, store: Store, rng: np.random.Generator,
         acf_path: Path) -> Outcome:
    started = time.monotonic()
    space = build_space(task.unit, task.source, toolkit.accepts)
    facts = read_facts(parse_call(list(task.job.argv), dict(task.job.env)))
    fixed = _fixed_settings(task, space)

    def flags_for(genome: Genome) -> tuple[str, ...]:
        return plan_flags({**fixed, **genome.settings()}, facts, toolkit).flags

    context = Context(toolkit.version, task.fingerprint, task.arch, "cpu", options.backend, str(task.unit),
                      _build_key(task.job))
    measurer = measurer_for(options.backend, task, acf_path, context, options.replay, options.timeout,
                            baseline_defines(task.source, space))
    context = replace(context, device=measurer.device)
    goal = goal_for(task.unit.tune, measurer.objectives)
    evaluator = Evaluator(task.job, goal, context, store, flags_for, measurer.measure, measurer.compiles,
                          workers=options.jobs)
    mine, others = store.for_context(context)
    others = [c for c in others if c.unit == context.unit and c.arch == context.arch]
    if others:
        log(f"{task}: {len(others)} other context(s) in the results store left aside "
            f"(e.g. {'; '.join(context.differences(others[0]))})")
    evaluator.resume(mine)
    baseline_genome = space.baseline()
    if baseline_genome not in evaluator.measured:
        evaluator([baseline_genome])
    baseline_measurement = evaluator.measured[baseline_genome]
    evaluator.baseline = dict(baseline_measurement.metrics)
    history = [evaluator.evaluation(g, m) for g, m in evaluator.measured.items()]   # with baseline known
    engine = Engine(space, rng, options.population, seeds=_seeds(task, space), history=history)
    log(f"{task}: {', '.join(task.reasons)}; backend {measurer.describe}; {goal}; space {space.size} points, {len(space.dimensions)} knobs"
        + (f"; resuming with {len(mine)} stored evaluations" if mine else ""))
    budget = Budget(options.evaluations, options.generations, options.seconds, options.patience)
    progress = run_search(engine, evaluator, budget,
                          lambda p, e: _report_generation(task, goal, p, e, evaluator, measurer.gpu, budget))
    base_eval = evaluator.evaluation(baseline_genome, baseline_measurement)
    best = choose(list(engine.seen.values()), engine.front(), base_eval, goal, evaluator.measured,
                  evaluator.baseline)
    outcome = Outcome(task, goal, space, baseline_measurement, best.genome, evaluator.measured[best.genome],
                      engine.front(), evaluator, progress, extra={"measurer": measurer})
    if measurer.gpu is not None and best.genome != baseline_genome and baseline_measurement.ok:
        _verify_on_gpu(outcome, measurer, flags_for)
    outcome.extra["seconds"] = time.monotonic() - started     # search and verification, this run
    return outcome


def _verify_on_gpu(outcome: Outcome, measurer, flags_for) -> None:
    """Interleaved re-measurement of the winner against the baseline; a gain
    that is not significant, or a wrong answer on fresh inputs, keeps the baseline."""
    from nvcc_evo.compile import compile_candidate
    from nvcc_evo.measure.gpu import verify
    task, gpu, baseline = outcome.task, measurer.gpu, outcome.space.baseline()
    cubins = {g: compile_candidate(replace(task.job, flags=flags_for(g))) for g in (baseline, outcome.chosen)}
    if not all(c.ok for c in cubins.values()):
        outcome.extra["rejected"] = "recompiling for the verification failed"
    else:
        stats, problem = verify(gpu.pool, (cubins[baseline].cubin, gpu.plan(baseline)),
                                (cubins[outcome.chosen].cubin, gpu.plan(outcome.chosen)))
        outcome.extra["stats"] = stats
        log(f"{task}: verification {stats}" + (f"; fresh inputs: {problem}" if problem else ""))
        if problem:
            outcome.extra["rejected"] = f"wrong on fresh inputs: {problem}"
        elif not stats.significant:
            outcome.extra["rejected"] = f"gain not significant ({stats})"
    if "rejected" in outcome.extra:
        outcome.chosen, outcome.chosen_measurement = baseline, outcome.baseline


def _build_key(job: CompileJob) -> str:
    return hashlib.sha256(repr((job.argv, job.env, job.nvcc)).encode()).hexdigest()[:16]


def _report_generation(task: Task, goal: Goal, progress: Progress, engine: Engine, evaluator: Evaluator,
                       gpu=None, budget: Budget | None = None) -> None:
    front = engine.front()
    best = ", ".join(f"{m}={v:.4g}" for m, v in zip(goal.minimize, front[0].objectives)) if front else "none feasible"
    t = evaluator.tally
    drift = gpu.drift() if gpu is not None else None      # the baseline again, between generations
    noted = f", baseline drift {drift:+.2%}" if drift is not None else ""
    pace = ""
    if budget is not None and progress.evaluations < budget.evaluations < float("inf"):
        left = progress.elapsed() / progress.evaluations * (budget.evaluations - progress.evaluations)
        pace = f"; at most {budget.evaluations - progress.evaluations} more, ~{left:.0f} s at this pace"
    log(f"{task} gen {progress.generation}: {progress.evaluations} evaluations ({t.reused} same binary, "
        f"{t.failed} failed), front {len(front)}, best {best}{noted} [{progress.elapsed():.0f} s{pace}]")


# ---------------------------------------------------------------- write back
def _settings_of(outcome: Outcome) -> tuple[acf.Setting, ...]:
    """Values a build must pass: not pinned (pins apply anyway), not the baseline."""
    chosen = []
    for (name, value), dim in zip(outcome.chosen.items, outcome.space.dimensions):
        if value is not None and not dim.pinned and value != dim.baseline:
            chosen.append(acf.Setting(name, value))
    chosen.extend(acf.Setting(k, v) for k, v in _fixed_settings(outcome.task, outcome.space).items())
    return tuple(chosen)


def _provenance(outcome: Outcome, toolkit, options: Options) -> tuple[acf.Record, ...]:
    t = outcome.evaluator.tally
    records = [acf.Record("fingerprint", outcome.task.fingerprint), acf.Record("toolkit", toolkit.version)]
    hello = outcome.extra["measurer"].hello
    if hello:
        records += [acf.Record("gpu", hello["name"]), acf.Record("cc", hello["cc"]),
                    acf.Record("driver", str(hello["driver"]))]
    records += [acf.Record("backend", options.backend), acf.Record("date", time.strftime("%Y-%m-%d")),
                acf.Record("seed", options.seed), acf.Record("evaluations", t.evaluated + t.resumed),
                acf.Record("reused", t.reused), acf.Record("search_seconds", round(outcome.extra["seconds"], 1))]
    whole = lambda v: int(v) if float(v).is_integer() else float(f"{v:.5g}")
    measured_too = tuple(m for m in ("runtime", "energy") if m in dict(outcome.baseline.metrics))
    for metric in dict.fromkeys(outcome.goal.minimize + (outcome.goal.select,) + measured_too):
        for side, measured in (("baseline", outcome.baseline), ("tuned", outcome.chosen_measurement)):
            value, spread = measured.get(metric), dict(measured.spreads).get(metric)
            if value == float("inf"):
                continue
            records.append(acf.Record(f"{side}.{metric}", whole(value),
                                      float(f"{value * spread:.3g}") if spread is not None else None))
    stats = outcome.extra.get("stats")
    if stats is not None:
        records += [acf.Record("test", stats.test), acf.Record("p_value", float(f"{stats.p_value:.3g}")),
                    acf.Record("effect_size", round(stats.effect, 4)), acf.Record("significant", stats.significant)]
    records.append(acf.Record("verdict", outcome.verdict))
    return tuple(records)


def write_back(acf_path: Path, outcome: Outcome, toolkit, options: Options) -> None:
    from nvcc_evo.acftext import read_text
    from nvcc_evo.format import update_target, write_atomic
    text = read_text(acf_path)
    target = acf.Target(outcome.task.arch, None, _settings_of(outcome), _provenance(outcome, toolkit, options))
    write_atomic(acf_path, update_target(text, outcome.task.unit_index, target, str(acf_path)))
    outcome.written = True


def _verdict(outcome: Outcome) -> str:
    if not outcome.baseline.ok:
        return f"baseline failed ({outcome.baseline.status}); nothing written"
    if "rejected" in outcome.extra:
        return f"baseline kept: {outcome.extra['rejected']}"
    if outcome.chosen == outcome.space.baseline():
        return "baseline kept: no candidate beat it"
    changes = []
    for metric in outcome.goal.minimize:
        before, after = outcome.baseline.get(metric), outcome.chosen_measurement.get(metric)
        if after != before:
            changes.append(f"{metric} {before:g} -> {after:g}")
    return ("improved " + ", ".join(changes)) if changes else "same scores; chosen by the selection rule"


# ---------------------------------------------------------------- entry point
def run_retune(options: Options) -> int:
    from nvcc_evo.report import render
    from nvcc_evo.resolve import load
    from nvcc_evo.toolkit import load_toolkit
    from nvcc_evo.wrapper import find_real_nvcc
    acf_path = Path(options.acf).resolve() if options.acf else find_acf([Path.cwd()], os.environ)
    if acf_path is None:
        raise UsageError(f"no {ACF_NAME} here or above; name one with --acf")
    swept = sweep_for(acf_path)
    if swept:
        log(f"removed {len(swept)} folder(s) and file(s) that killed runs left: {', '.join(swept)}")
    toolkit = load_toolkit(find_real_nvcc())
    file = load(acf_path)
    options = replace(options, backend=resolve_backend(options.backend))
    try:
        if options.backend == "pycuda" and options.target is None and not options.dry_run:
            from nvcc_evo.measure.choose import gpu_pool
            options = replace(options, target=gpu_pool().hello["arch"])   # measure what this GPU runs
        log(f"{acf_path}: {toolkit}; backend {options.backend}"
            + (" (no GPU timing: registers, spills and other compiler facts are the objectives)"
               if options.backend == "static" else ""))
        tasks = find_tasks(file, acf_path, toolkit, options)
        if not tasks:
            log("nothing to retune: every unit and target is up to date, or kept for a GPU as said above "
                "(use --all to force)")
            return ExitCode.OK
        if options.dry_run:
            for task in tasks:
                print(f"{task}: {'; '.join(task.reasons)}")
            log(f"{len(tasks)} to retune (dry run: nothing tuned)")
            return ExitCode.OK
        store = Store(acf_path.parent / ".nvcc-evo" / "results.jsonl")
        outcomes = _retune_all(tasks, options, toolkit, store, acf_path)
    finally:
        close_pool()
    print(render(outcomes), end="")
    failed = [str(o.task) for o in outcomes if not o.baseline.ok]
    if failed:        # a build that cannot even make its baseline must not look like a finished retune
        log(f"{len(failed)} of {len(outcomes)} not tuned, their baseline failed: {', '.join(failed)} "
            "(see above); the others are written")
        return ExitCode.INVALID_INPUT
    return ExitCode.OK


def _retune_all(tasks: list[Task], options: Options, toolkit, store: Store, acf_path: Path) -> list[Outcome]:
    outcomes = []
    for task in tasks:
        try:
            outcome = tune(task, options, toolkit, store, np.random.default_rng(options.seed), acf_path)
        except KeyboardInterrupt:
            log(f"interrupted: every finished evaluation is kept in {store.path}; "
                "the same command resumes from there")
            raise
        outcome.verdict = _verdict(outcome)
        if outcome.baseline.ok:
            write_back(acf_path, outcome, toolkit, options)
        outcomes.append(outcome)
    return outcomes
