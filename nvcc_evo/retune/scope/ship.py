"""The ship check before a write (`ship_check`): the wrapper's own decision
for the recorded call, with the entry about to be written in a copy of the
ACF beside it, compiled for the target and compared with the SASS that was
measured; a register cap that would hang a kernel is refused too
(retune.scope.caps.hangs).
"""
from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from nvcc_evo.acf import model
from nvcc_evo.acf.edit.retarget import update_target
from nvcc_evo.acf.text import read_text
from nvcc_evo.cubin.compile import compile_candidate
from nvcc_evo.cubin.sass import sass_hash
from nvcc_evo.driver.common import ACF_ENV
from nvcc_evo.driver.cmdline.compileplan import CompilePlan, RecordedBuild
from nvcc_evo.driver.cmdline.flags import FlagPlan, Skipped
from nvcc_evo.driver.cmdline.ptxas import PTXAS_ENV
from nvcc_evo.driver.match.units import written_for
from nvcc_evo.driver.wrapper import decide
from nvcc_evo.retune.outcome.writeback import settings_of
from nvcc_evo.retune.scope.caps import REGISTER_CAPS, hangs

SHIP_CHECK_TIMEOUT = 900.0      # seconds: the ship check's one compile (see ship_check)

if TYPE_CHECKING:
    from nvcc_evo.acf.knobs import Scalar
    from nvcc_evo.driver.toolkit import Toolkit
    from nvcc_evo.cubin.compile import CompileJob, CompileResult
    from nvcc_evo.retune.scope.tasks import Task
    from nvcc_evo.retune.outcome.choice import Outcome
    from nvcc_evo.retune.scope.reach import BuildStep


def ship_check(outcome: Outcome, acf_path: Path, toolkit: Toolkit, ptxas: tuple[str, ...],
               build: BuildStep, measured_job: CompileJob) -> str:
    """Why the entry about to be written would not give the build the code that was measured (""
    when it would): the wrapper's own decision for the recorded call, with that entry in a copy of
    the ACF beside it (where the unit's globs mean the same), compiled for the target; its SASS
    compared with the measured candidate's (`measured_job`: how it was built), as stored, else as
    that candidate compiles now. Names the knob and the difference."""
    if not isinstance(build, RecordedBuild):
        return ""       # (a kernel unit's: the program's own ptxas call, dropin_ptxas.decide)
    task, chosen = outcome.task, outcome.chosen
    measured = outcome.measured.digest(chosen)
    written = {s.knob: s.value for s in settings_of(outcome)}
    step, program = _as_built(task, written, acf_path, build, ptxas)
    missing = [f"{knob} = {value} ({why})" for knob, value in written.items()
               if (why := _skipped(step, knob, value))]
    if missing:
        return "the build would not pass " + "; ".join(missing)
    hang = _never_ends(outcome, written, acf_path, build, ptxas)
    if hang:
        return hang
    if not measured:
        return ""
    pinned = {pin.knob for pin in task.unit.pins}
    # The baseline kept, its entry as it was (and read: no other entry's knobs): nothing to compile.
    kept_as_it_was = (chosen == outcome.space.baseline() and written == _entry_now(task)
                      and program is None and set(dict(step.applied)) <= set(written) | pinned)
    if kept_as_it_was:
        return ""
    # A genome that compiled already: a timeout of its own, not the candidates' --timeout (on a
    # loaded machine that one compile could run past a short one, and a sound entry would not be
    # written).
    built = compile_candidate(replace(task.job, flags=step.flags, ptxas=program,
                                      timeout=max(task.job.timeout, SHIP_CHECK_TIMEOUT)))
    if not built.ok:
        flags = " ".join(step.flags) or "none"
        return f"the build's flags ({flags}) do not compile: {built.status}"
    code = sass_hash(built.cubin, built.module_id)
    if code == measured or _compiles_now_to(measured_job, code):
        return ""
    added = [f for f in step.flags if f not in measured_job.flags]
    lost = [f for f in measured_job.flags if f not in step.flags]
    return (f"the build's SASS for {task.arch} differs from the measured one (the build adds "
            f"{' '.join(added) or 'nothing more'}, and lacks {' '.join(lost) or 'nothing'} of the "
            f"measured flags)")


def _never_ends(outcome: Outcome, written: dict, acf_path: Path, build: RecordedBuild,
                ptxas: tuple[str, ...]) -> str:
    """Why the entry's register cap would hang a kernel ("" where it would not: `hangs`). A cap the
    search left out can still come from a hand-written entry: the chosen build (kerneldiff.compare's
    comparison) is looked at, and only where it has a kernel that moves registers, the build without
    the caps compiled."""
    compared, task = outcome.kernels, outcome.task
    if compared is None:
        return ""

    def uncapped() -> CompileResult:
        plain = {k: v for k, v in written.items() if k not in REGISTER_CAPS}
        step, program = _as_built(task, plain, acf_path, build, ptxas)
        return compile_candidate(replace(task.job, flags=step.flags, ptxas=program,
                                         timeout=max(task.job.timeout, SHIP_CHECK_TIMEOUT)))
    return hangs(written, compared.chosen.kernels, uncapped, task.arch)


def _compiles_now_to(job: CompileJob, code: str) -> bool:
    """Whether the measured candidate, compiled again, is `code`: its stored hash may be an older
    nvcc-evo's, one that kept the process id ending nvcc's module id (cubin.sass.sass_hash)."""
    again = compile_candidate(replace(job, timeout=max(job.timeout, SHIP_CHECK_TIMEOUT)))
    return again.ok and sass_hash(again.cubin, again.module_id) == code


def _entry_now(task: Task) -> dict:
    """The knobs of the unit's entry for the target as the ACF held it when the search began."""
    current = task.entry
    return {s.knob: s.value for s in current.settings} if current is not None else {}


def _skipped(step: FlagPlan, knob: str, value: Scalar) -> str:
    applied = dict(step.applied)
    if knob in applied and applied[knob] == value:
        return ""
    reasons = [s.why for s in step.skipped if s.knob == knob]
    if reasons:
        return reasons[0]
    if knob in applied:
        return f"it passes {applied[knob]!r}"
    return "it passes nothing"


def _as_built(task: Task, written: dict, acf_path: Path, build: RecordedBuild,
              ptxas: tuple[str, ...]) -> tuple[FlagPlan, str | None]:
    """The wrapper's decision (nvcc_evo.driver.wrapper.decide) for the recorded call with `written`
    as the unit's entry for the target: the target step's FlagPlan and ptxas program."""
    gpu = written_for(task.unit, task.arch, task.built_for)        # (the block write_back writes)
    target = model.Target(task.arch, gpu, tuple(model.Setting(k, v) for k, v in written.items()))
    copy = acf_path.parent / f".nvcc-evo-candidate-{os.getpid()}.acf"
    copy.write_text(update_target(read_text(acf_path), task.unit.globs, target, str(acf_path)))
    try:
        plain = {k: v for k, v in os.environ.items() if not k.startswith("NVCC_EVO_")}
        environ = {**plain, **dict(task.job.env), **dict(task.build_env), ACF_ENV: str(copy),
                   PTXAS_ENV: os.pathsep.join(ptxas)}
        decision = decide(list(build.call.argv), Path(task.job.nvcc), environ, Path(task.job.cwd))
    finally:
        copy.unlink(missing_ok=True)
    if decision.flags is None:
        passed_through = decision.call_plan.passthrough
        return FlagPlan((), (), tuple(Skipped(k, passed_through) for k in written)), None
    planned = CompilePlan(decision.flags, decision.per_step, decision.programs)
    key = (build.input, task.arch)
    return planned.step(key), planned.program(key)
