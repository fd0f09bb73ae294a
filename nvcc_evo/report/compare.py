"""`nvcc-evo --sass [UNIT-GLOB...] [--target sm_XX]`: each unit's baseline
(the build's own flags) and its ACF entry built as the wrapper builds them
(the compile plan of the unit's recorded build, retune.reach.recorded_build:
what a retune's candidates compile with) and compared kernel by kernel in
the terminal (retune.kernels, retune.kernelview): registers, occupancy at
the bench's block size, spills, shared memory, instructions and the
instruction mix. A knob of the entry that the build would not pass is not
built, and said. No search, no GPU; nothing the ACF names is run, and no
program a compile record names (a cloned repository's `-ccbin tools/g++`)
unless the user asks (`--run-recorded`): the real nvcc found as a build
finds it, with the record's other options. The project is opened as every
verb opens it (driver.project: another user's ACF refused).
"""
from __future__ import annotations

import os
import shlex
from dataclasses import replace

from nvcc_evo.driver.cmdline.nvcc_options import tokenize, without_programs
from nvcc_evo.errors import ExitCode
from nvcc_evo.retune.kernels import SassUnavailable, compare
from nvcc_evo.retune.kernelview import lines, notes
from nvcc_evo.retune.options import Options, with_settings
from nvcc_evo.driver.project import open_project
from nvcc_evo.retune.reach import REGISTER_CAPS, hangs, not_shipped, recorded_build
from nvcc_evo.driver.targets import check_target
from nvcc_evo.retune.tasks import Task, find_tasks
from nvcc_evo.system.say import log
from nvcc_evo.engine.space import baseline_defines, build_space
from nvcc_evo.retune.writeback import fixed_settings


def run_sass(acf: str | None, globs: tuple[str, ...], target: str | None, run_recorded: bool = False) -> int:
    """Each unit's two builds compared in the terminal; programs a compile
    record names run only with `run_recorded` (`--run-recorded`)."""
    from nvcc_evo.acf.resolve import load
    from nvcc_evo.driver.toolkit import load_toolkit
    opened = open_project("--sass", acf, globs)              # found, trusted, readable; settings
    acf_path, project = opened.acf_path, opened.settings
    toolkit = load_toolkit(opened.real_nvcc())
    check_target(target, toolkit)
    options = Options(globs=globs, target=target, all=True, backend="static")
    listed = with_settings(options, project)        # the ptxas binaries ptxas.version chooses among, as for a build
    options = replace(options, ptxas=listed.ptxas, ptxas_source=listed.ptxas_source)
    tasks, skipped, _ = find_tasks(load(acf_path), acf_path, toolkit, options)
    failed, shown = 0, []
    for task in tasks:
        if not run_recorded:
            task = _own_programs(task)
        space = build_space(task.unit, task.source, toolkit.accepts)
        build = recorded_build(task, acf_path, toolkit, options)      # the compile plan the wrapper builds with
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
            failed += 1
            continue
        plain = {k: v for k, v in held.items() if k not in REGISTER_CAPS}
        hang = hangs(held, comparison.chosen.kernels, lambda: _side(task, build, plain)[1](), task.arch)
        if hang:
            log(f"{task}: warning: its entry's {hang}")
        said = "its ACF entry" if entry is not None else "no ACF entry: the baseline twice"
        print(f"{task}: the build's own flags against {said}")
        print("\n".join(lines(comparison, note=False)))
        shown.append(comparison)
    for note in notes(shown):
        print(note)
    return ExitCode.INVALID_INPUT if failed or skipped or not tasks else ExitCode.OK


def _side(task, build, settings: dict):
    """One side of the comparison: the knob values that reach the target's
    code, how to build it (the flags and ptxas program the compile plan
    gives that step), and the step's FlagPlan."""
    from nvcc_evo.cubin.compile import compile_candidate
    step, program = build.step(settings)
    job = replace(task.job, flags=step.flags, ptxas=program or task.job.ptxas)
    return dict(step.applied), lambda: compile_candidate(job), step


# A compile record's environment that names programs or code its compile runs: the host compiler, the libraries
# nvcc's tools load; and the flags nvcc reads from the environment (kept, less what names a program).
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
    log(f"{task}: --sass runs no program a compile record names; left out: {'; '.join(left)} (--run-recorded "
        f"runs them, as the build did)")
    return replace(task, job=replace(job, argv=tuple(argv), env=tuple(env), ptxas=None))
