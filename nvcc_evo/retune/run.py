"""`nvcc-evo --retune`: one search per stale (unit, target), its choice
written back into the ACF.

What one retune does and the settings it runs with come from
nvcc_evo.retune.scope.options; what is stale and how each unit is built from
nvcc_evo.retune.scope.tasks; one search, as prepare -> search -> decide, from
nvcc_evo.retune.search.prepare and .tune; the write into the ACF (by identity, under its lock)
from nvcc_evo.retune.outcome.writeback. Here: the ACF and its settings, the one
Options decided from them (retune.scope.options), the tasks, every search (one
after another or several at once), the ship check and the write, the end
report and exit status; and `--sass`'s builds
(`compare_entries`: each unit's entry against its build's own flags, kernel
by kernel, no search), which report.compare shows.
"""
from __future__ import annotations

import os
import shlex
from contextlib import nullcontext
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, cast

import numpy as np

from nvcc_evo import backends
from nvcc_evo.acf.resolve import load
from nvcc_evo.cubin.compile import CompileResult, compile_candidate
from nvcc_evo.cubin.sass import KernelFacts
from nvcc_evo.driver.cache import prune
from nvcc_evo.driver.cmdline.flags import FlagPlan
from nvcc_evo.driver.cmdline.nvcc_options import tokenize, without_programs
from nvcc_evo.driver.project import Project, open_project
from nvcc_evo.driver.targets import check_target
from nvcc_evo.driver.toolkit import Toolkit, cache_folder_if_any, load_toolkit
from nvcc_evo.engine.space import baseline_defines, build_space
from nvcc_evo.errors import AcfChanged, AcfError, ExitCode, Interrupted
from nvcc_evo.execute.cluster import Cluster, open_cluster
from nvcc_evo.execute.devices import close_pool, gpu_arch, measuring_gpu, resolve_backend
from nvcc_evo.execute.evaluate import Stopped
from nvcc_evo.execute.measurers import check_benches, check_kernel_times
from nvcc_evo.execute.store import Store
from nvcc_evo.execute.together import Together, how_many, run_together
from nvcc_evo.execute.warm import project_stores
from nvcc_evo.kerneldiff.compare import (STORE_NAME, Comparison, KernelStore, SassUnavailable,
                                         compare)
from nvcc_evo.retune.outcome.choice import Outcome
from nvcc_evo.retune.outcome.summary import render
from nvcc_evo.retune.outcome.writeback import (Writing, fixed_settings, one_retune_at_a_time,
                                               say_rebuild, verdict_of, write_back)
from nvcc_evo.retune.scope.caps import REGISTER_CAPS, hangs
from nvcc_evo.retune.scope.options import (Chosen, Request, Selection, choose_settings,
                                           decide_options, ptxas_listed, say_settings)
from nvcc_evo.retune.scope.reach import BuildStep, not_shipped, recorded_build
from nvcc_evo.retune.scope.ship import ship_check
from nvcc_evo.retune.scope.tasks import Task, find_tasks
from nvcc_evo.retune.search.prepare import Candidates, Retune, prepare
from nvcc_evo.retune.search.progress import board_for
from nvcc_evo.retune.search.speedsafe import say_waiting, set_aside
from nvcc_evo.retune.search.tune import decide, search
from nvcc_evo.system.leftovers import sweep_for
from nvcc_evo.system.locks import Wait
from nvcc_evo.system.programs import said
from nvcc_evo.system.say import log


def _write_or_say_why(retune: Retune, writing: Writing, outcome: Outcome,
                      candidates: Candidates) -> None:
    """Write the outcome (once the ship check finds the build would give the
    code that was measured); a unit the ACF no longer has as it was (or an
    ACF that does not parse now) is reported on stderr and in the summary."""
    acf_path, toolkit, ptxas = retune.acf_path, retune.toolkit, retune.preparing.ptxas
    try:
        shipped = ship_check(outcome, acf_path, toolkit, ptxas.paths, candidates.build,
                             candidates.job(outcome.chosen))
        if shipped:
            raise AcfChanged(f"ship check: {outcome.task.unit} [{outcome.task.arch}]: {shipped}")
        write_back(acf_path, outcome, toolkit, writing)
        return
    except AcfChanged as problem:
        reason = str(problem)
    except AcfError as problem:          # saved mid-edit, say
        reason = f"the ACF has errors now:\n{problem}"
    except FileNotFoundError:
        reason = f"{acf_path} is gone"
    except OSError as problem:   # a full disk: the other units go on, the table is printed, exit 3
        reason = f"cannot write the ACF {acf_path}: {problem.strerror or problem}"
        outcome.cannot_write = True
    outcome.not_written = reason
    outcome.verdict += f"; NOT written: {reason}"
    log(f"{outcome.task}: not written to the ACF: {reason} (its evaluations are kept in the "
        "results store)")


# ---------------------------------------------------------------- entry point
def run_retune(request: Request) -> int:
    # found, trusted, readable; settings
    opened = open_project("the retune", request.acf, request.globs)
    acf_path, project = opened.acf_path, opened.settings
    chosen = choose_settings(request, project)   # each setting by the settings' precedence, once
    toolkit = _set_up(request.dry_run, chosen, opened)
    held = one_retune_at_a_time(acf_path, request.dry_run, Wait(chosen.lock_wait, log))
    cluster = None
    try:
        file = load(acf_path)
        cluster = open_cluster(chosen.cluster, request.dry_run)
        # the retune's one Options, never decided again
        options = decide_options(request, chosen, Where(cluster))
        row = backends.row(options.backend)
        log(f"{acf_path}: {toolkit}; backend {options.backend}"
            + (" (no GPU timing: registers, spills and other compiler facts are the objectives)"
               if row.facts_only else ""))
        say_settings(project, options)
        gpu = measuring_gpu(options.measuring(), options.dry_run, cluster)
        tasks, skipped, kept = find_tasks(file, acf_path, toolkit, options.selection(), gpu,
                                          run_benches=True)
        tasks, waiting = set_aside(tasks, log) if options.auto and row.facts_only else (tasks, [])
        if not options.dry_run:   # (a dry run lists what is stale, whatever would measure it)
            check_benches(tasks, options.backend)
            check_kernel_times((t.unit for t in tasks), options.backend, toolkit.nvcc)
        if not tasks:
            return _nothing_to_retune(skipped, waiting, kept)
        if options.dry_run:
            return _dry_run(tasks, skipped)
        wait = Wait(options.lock_wait, log)
        store = _results_store(acf_path, wait)
        listed = project.value("report.stores").value             # (a list of paths, or None)
        stores = [Path(p) for p in listed] if isinstance(listed, list) else []
        known = project_stores(acf_path.parent, (str(unit) for unit in file.units), stores,
                               store.path, log, _kernels_of(store.path.parent / STORE_NAME))
        retune = Retune(options.preparing(), options.searching(), toolkit, store, acf_path,
                        cluster, known)
        outcomes = _retune_all(tasks, retune, Writing(options.backend, options.seed, wait),
                               options.at_once)
    finally:
        close_pool()
        if cluster is not None:
            cluster.close()
        held.close()
    print(render(outcomes), end="")
    say_rebuild(acf_path, outcomes, redated=row.rebuilds)
    say_waiting(waiting, log)
    return _exit_status(outcomes, skipped)


def _set_up(dry_run: bool, chosen: Chosen, opened: Project) -> Toolkit:
    """The cache kept bounded, what killed runs left swept (not by a dry
    run); the toolkit, and the target chosen checked against it."""
    if not dry_run:                 # (a dry run removes nothing: it lists)
        cache = cache_folder_if_any()   # (none where a link or a file is in its place)
        if cache is not None:
            prune(cache)                # the cache folder kept bounded (driver.cache)
        swept = sweep_for(opened.acf_path)
        if swept:
            log(f"removed {len(swept)} folder(s) and file(s) that killed runs left: "
                f"{', '.join(swept)}")
    toolkit = load_toolkit(opened.real_nvcc())
    check_target(cast("str | None", chosen.value("retune.target")), toolkit,
                 chosen.source("retune.target"))
    return toolkit


class Where:
    """Where candidates are measured (retune.scope.options.Machine): this machine, or the
    cluster."""

    def __init__(self, cluster: Cluster | None):
        self.cluster = cluster

    def backend(self, asked: str) -> str:
        return resolve_backend(asked, self.cluster)

    def gpu_target(self, device: int) -> str:
        return gpu_arch(device, self.cluster)


def _nothing_to_retune(skipped: list[str], waiting: list, kept: int) -> int:
    """Said, and the exit status: 1 where a unit was skipped; 3 (as `--backend
    pycuda` without a GPU) where every stale unit waits for a measurement
    this machine cannot make: nothing was done that the run was asked for."""
    if skipped:
        log(f"nothing retuned: {len(skipped)} skipped, as said above")
    elif waiting:
        log("nothing retuned: every stale unit asks for a measurement, and no GPU answers here "
            "(backend auto is static)")
    elif kept:
        entries = "entry" if kept == 1 else "entries"
        log(f"nothing retuned: {kept} stale {entries} measured on a GPU kept for one, as said "
            "above; the rest are up to date (name a unit or use --all to overwrite)")
    else:
        log("nothing to retune: every unit and target is up to date (use --all to force)")
    say_waiting(waiting, log)
    if skipped:
        return ExitCode.INVALID_INPUT
    return ExitCode.ENVIRONMENT if waiting else ExitCode.OK


def _dry_run(tasks: list[Task], skipped: list[str]) -> int:
    """`--dry-run`: what is stale and why, on stdout; nothing tuned."""
    for task in tasks:
        print(f"{task}: {'; '.join(map(str, task.reasons))}")
    log(f"{len(tasks)} to retune (dry run: nothing tuned)"
        + (f"; {len(skipped)} skipped" if skipped else ""))
    log(f"programs run: {said()}")
    return ExitCode.INVALID_INPUT if skipped else ExitCode.OK


def _results_store(acf_path: Path, wait: Wait) -> Store:
    store = Store(acf_path.parent / ".nvcc-evo" / "results.jsonl", wait)
    store.read()
    if store.skipped:
        log(f"{store.skipped} line(s) of the results store {store.path} skipped (cut short, or "
            "not results of this version's shape)")
    return store


def _kernels_of(path: Path) -> Callable[[str, str], tuple[KernelFacts, ...] | None]:
    """A unit's baseline kernels on an architecture as its latest retune compared them
    (kernels.jsonl, read when asked: a search of this retune may have written them)."""
    def latest(unit: str, arch: str) -> tuple[KernelFacts, ...] | None:
        found = [c.baseline.kernels for c in KernelStore(path).read()
                 if (c.unit, c.arch) == (unit, arch)]
        return found[-1] if found else None
    return latest


def _exit_status(outcomes: list[Outcome], skipped: list[str]) -> int:
    """A retune that could not build (or even find) some unit must not look finished."""
    failed = [str(o.task) for o in outcomes if not o.baseline.ok]
    if failed:
        log(f"{len(failed)} of {len(outcomes)} not tuned, their baseline failed: "
            f"{', '.join(failed)} (see above)")
    if skipped:
        log(f"{len(skipped)} skipped before the search: {', '.join(skipped)} (see above)")
    # the ACF changed under the retune (said above)
    not_written = any(o.not_written is not None for o in outcomes)
    if any(o.cannot_write for o in outcomes):
        return ExitCode.ENVIRONMENT
    return ExitCode.INVALID_INPUT if failed or skipped or not_written else ExitCode.OK


def _one(task: Task, retune: Retune, writing: Writing,
         together: Together | None = None) -> Outcome:
    """One search, prepare -> search -> decide (retune.search.prepare, .tune), and its choice
    written into the ACF (one write at a time)."""
    rng = np.random.default_rng(retune.searching.seed)
    prepared = prepare(task, retune, together)
    outcome = decide(prepared, search(prepared, retune, rng, together), retune, together)
    outcome.verdict = verdict_of(outcome)
    if outcome.baseline.ok and not outcome.settled:
        with together.writing if together else nullcontext():     # one write into the ACF at a time
            if together is not None and together.stopping.is_set():
                raise Stopped()
            with together.slots if together else nullcontext():    # (the ship check compiles)
                _write_or_say_why(retune, writing, outcome, prepared.candidates)
    return outcome


def _retune_all(tasks: list[Task], retune: Retune, writing: Writing,
                at_once: int | None) -> list[Outcome]:
    """Every task's search and choice, one after another or several at once (execute.together:
    `at_once`, or as many as it decides)."""
    searching, jobs, cluster = retune.searching, retune.preparing.jobs, retune.cluster
    count = how_many(at_once, len(tasks), searching.backend, searching.population, cluster, log)
    try:
        if count > 1:
            if cluster is not None:
                shared = f"the cluster's {cluster.workers} CPUs"
            else:
                shared = f"{jobs or os.cpu_count()} slots"
            log(f"{len(tasks)} searches, {count} at once (compiles sharing {shared}; one "
                "candidate at a time on each GPU)")
            board = board_for(searching.progress, log)     # a bar each, on a terminal
            try:
                return run_together(tasks, count, jobs,
                                    lambda task, together: _one(task, retune, writing, together),
                                    board)
            finally:
                if board is not None:
                    board.close()
        return [_one(task, retune, writing) for task in tasks]
    except KeyboardInterrupt:
        raise Interrupted(f"interrupted: every finished evaluation is kept in {retune.store.path}; "
                          "the same command resumes from there") from None


# ------------------------------------------- --sass: an entry's kernels against the build's own
@dataclass(frozen=True)
class EntryCompared:
    """One unit and target of --sass: the kernels of its build's own flags against those of its
    ACF entry (`held`: it has one; else the baseline twice); None where they could not be built
    (said on stderr)."""

    task: Task
    held: bool
    comparison: Comparison | None


def compare_entries(opened: Project, globs: tuple[str, ...], target: str | None,
                    run_recorded: bool) -> tuple[list[EntryCompared], list[str]]:
    """Each unit's entry and baseline built as the wrapper builds them (the compile plan of its
    recorded build) and compared kernel by kernel, and the (unit, target) pairs that could not be;
    no program a compile record names is run unless `run_recorded`."""
    acf_path = opened.acf_path
    toolkit = load_toolkit(opened.real_nvcc())
    check_target(target, toolkit)
    # the ptxas binaries ptxas.version chooses among, as a build
    listed = ptxas_listed(opened.settings)
    selection = Selection(globs, True, target)
    tasks, skipped, _ = find_tasks(load(acf_path), acf_path, toolkit, selection)
    return [_entry_compared(task if run_recorded else _own_programs(task), acf_path, toolkit,
                            listed.paths)
            for task in tasks], skipped


def _entry_compared(task: Task, acf_path: Path, toolkit: Toolkit,
                    ptxas: tuple[str, ...]) -> EntryCompared:
    space = build_space(task.unit, task.source, toolkit.accepts)
    # the compile plan the wrapper builds with
    build = recorded_build(task, acf_path, toolkit, ptxas)
    entry = task.entry
    baseline = {**fixed_settings(task, space), **space.baseline().settings()}
    held = {s.knob: s.value for s in entry.settings} if entry is not None else baseline
    sides = [_side(task, build, settings) for settings in (baseline, held)]
    lost = not_shipped(sides[1][2], held)
    if lost:
        log(f"{task}: not built here, as the build passes none of it: {lost}")
    try:
        comparison = compare(task.unit, task.arch, "cpu", "static", sides[0][:2], sides[1][:2],
                             baseline_defines(task.source, space), task.job.nvcc)
    except SassUnavailable as error:
        log(f"{task}: {error}")
        return EntryCompared(task, entry is not None, None)
    plain = {k: v for k, v in held.items() if k not in REGISTER_CAPS}
    hang = hangs(held, comparison.chosen.kernels, lambda: _side(task, build, plain)[1](), task.arch)
    if hang:
        log(f"{task}: warning: its entry's {hang}")
    return EntryCompared(task, entry is not None, comparison)


def _side(task: Task, build: BuildStep,
          settings: dict) -> tuple[dict, Callable[[], CompileResult], FlagPlan]:
    """One side of the comparison: the knob values that reach the target's
    code, how to build it (the flags and ptxas program the compile plan
    gives that step), and the step's FlagPlan."""
    step, program = build.step(settings)
    job = replace(task.job, flags=step.flags, ptxas=program or task.job.ptxas)
    return dict(step.applied), lambda: compile_candidate(job), step


# A compile record's environment that names programs or code its compile runs: the host compiler,
# the libraries nvcc's tools load; and the flags nvcc reads from the environment (kept, less what
# names a program).
PROGRAM_ENV = ("NVCC_CCBIN", "CUDAHOSTCXX", "LD_LIBRARY_PATH")
FLAGS_ENV = ("NVCC_PREPEND_FLAGS", "NVCC_APPEND_FLAGS")


def _own_programs(task: Task) -> Task:
    """`task` built with none of the programs its compile record names (a
    cloned repository's record may name its own `-ccbin tools/g++`): the
    record's options less `-ccbin` and the host compiler's options that run
    or load code, its environment less the host compiler and libraries it
    names (where they differ from this environment's), and nvcc's own ptxas
    for a kernel's; what is left out is said."""
    job = task.job
    argv, left = without_programs(list(job.argv), job.cwd)
    env = []
    for name, value in job.env:
        if os.environ.get(name) == value:            # the user's own setting, not the record's
            env.append((name, value))
        elif name in PROGRAM_ENV:
            left.append(f"{name}={value}")
        elif name in FLAGS_ENV:
            kept, dropped = without_programs(tokenize(value))
            left += [f"{name}: {' '.join(dropped)}"] if dropped else []
            env.append((name, " ".join(shlex.quote(word) for word in kept)))
        else:
            env.append((name, value))
    if job.ptxas is not None:
        left.append(f"the ptxas {job.ptxas}")
    if not left:
        return task
    log(f"{task}: --sass runs no program a compile record names; left out: {'; '.join(left)} "
        "(--run-recorded runs them, as the build did)")
    return replace(task, job=replace(job, argv=tuple(argv), env=tuple(env), ptxas=None))
