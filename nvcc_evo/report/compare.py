"""`nvcc-evo --sass [UNIT-GLOB...] [--target sm_XX]`: each unit's baseline
(the build's own flags) and its ACF entry built as a retune builds them
(retune.options.Builds) and compared kernel by kernel in the terminal
(retune.kernels, retune.kernelview): registers, occupancy at the bench's
block size, spills, shared memory, instructions and the instruction mix.
No search, no GPU; nothing the ACF names is run.
"""
from __future__ import annotations

import os
from pathlib import Path

from nvcc_evo.errors import EnvironmentProblem, ExitCode, UsageError
from nvcc_evo.retune.kernels import SassUnavailable, compare
from nvcc_evo.retune.kernelview import lines
from nvcc_evo.retune.options import Options, builds_for, real_nvcc
from nvcc_evo.retune.tasks import check_target, find_tasks
from nvcc_evo.system.say import log
from nvcc_evo.engine.space import baseline_defines, build_space
from nvcc_evo.retune.writeback import current_genome


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
    tasks, skipped, _ = find_tasks(load(acf_path), acf_path, toolkit, options)
    failed = 0
    for task in tasks:
        space = build_space(task.unit, task.source, toolkit.accepts)
        builds = builds_for(task, space, toolkit, acf_path, options)
        entry = current_genome(task, space)
        side = lambda genome: (genome.settings(), lambda: _compiled(builds.job_for(genome)))
        try:
            comparison = compare(task.unit, task.arch, "cpu", "static", side(space.baseline()),
                                 side(entry if entry is not None else space.baseline()),
                                 baseline_defines(task.source, space), task.job.nvcc)
        except SassUnavailable as error:
            log(f"{task}: {error}")
            failed += 1
            continue
        said = "its ACF entry" if entry is not None else "no ACF entry: the baseline twice"
        print(f"{task}: the build's own flags against {said}")
        print("\n".join(lines(comparison)))
    return ExitCode.INVALID_INPUT if failed or skipped or not tasks else ExitCode.OK


def _compiled(job):
    from nvcc_evo.measure.candidate import compile_candidate
    return compile_candidate(job)
