"""`nvcc-evo --sass [UNIT-GLOB...] [--target sm_XX]`: each unit's baseline
(the build's own flags) and its ACF entry built as the wrapper builds them
(the compile plan of the unit's recorded build, retune.reach.recorded_build:
what a retune's candidates compile with) and compared kernel by kernel in
the terminal (retune.kernels, retune.kernelview): registers, occupancy at
the bench's block size, spills, shared memory, instructions and the
instruction mix. A knob of the entry that the build would not pass is not
built, and said. No search, no GPU; nothing the ACF names is run.
"""
from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

from nvcc_evo.errors import EnvironmentProblem, ExitCode, UsageError
from nvcc_evo.retune.kernels import SassUnavailable, compare
from nvcc_evo.retune.kernelview import lines, notes
from nvcc_evo.retune.options import Options, real_nvcc, with_settings
from nvcc_evo.retune.reach import REGISTER_CAPS, hangs, not_shipped, recorded_build
from nvcc_evo.driver.targets import check_target
from nvcc_evo.retune.tasks import find_tasks
from nvcc_evo.system.say import log
from nvcc_evo.engine.space import baseline_defines, build_space
from nvcc_evo.retune.writeback import fixed_settings


def run_sass(acf: str | None, globs: tuple[str, ...], target: str | None) -> int:
    from nvcc_evo.acf.resolve import load
    from nvcc_evo.driver import settings
    from nvcc_evo.driver.common import ACF_NAME
    from nvcc_evo.driver.match.find import acf_problem, find_acf
    from nvcc_evo.driver.toolkit import load_toolkit
    named = [Path.cwd() / g for g in globs if (Path.cwd() / g).is_file()]
    acf_path = Path(acf).resolve() if acf else find_acf([p.parent for p in named] + [Path.cwd()], os.environ)
    if acf_path is None:
        raise UsageError(f"no {ACF_NAME} here or above; name one with --acf")
    problem = acf_problem(acf_path, os.environ)
    if problem:
        raise EnvironmentProblem(problem)
    project = settings.load(acf_path, os.environ)
    toolkit = load_toolkit(real_nvcc(project))
    check_target(target, toolkit)
    options = Options(globs=globs, target=target, all=True, backend="static")
    listed = with_settings(options, project)        # the ptxas binaries ptxas.version chooses among, as for a build
    options = replace(options, ptxas=listed.ptxas, ptxas_source=listed.ptxas_source)
    tasks, skipped, _ = find_tasks(load(acf_path), acf_path, toolkit, options)
    failed, shown = 0, []
    for task in tasks:
        space = build_space(task.unit, task.source, toolkit.accepts)
        build = recorded_build(task, acf_path, toolkit, options)      # the compile plan the wrapper builds with
        entry = task.unit.entry_for(task.arch)
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
    from nvcc_evo.measure.candidate import compile_candidate
    step, program = build.step(settings)
    job = replace(task.job, flags=step.flags, ptxas=program or task.job.ptxas)
    return dict(step.applied), lambda: compile_candidate(job), step
