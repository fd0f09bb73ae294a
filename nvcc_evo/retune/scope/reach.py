"""What reaches the user's binary: a retune searches, reports and writes
only knob values that the unit's recorded build passes to the target's code.

Both questions go to the compile plan the wrapper builds with
(nvcc_evo.driver.cmdline.compileplan): before the search, which values of each
dimension the build would pass (`reachable`: the others are left out of the
space, said once per knob with the reason); before the write, the ship check
(`ship_check`): the wrapper's own decision for the recorded call, with the
entry about to be written in a copy of the ACF beside it, compiled for the
target and compared with the SASS that was measured.
"""
from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Mapping, Protocol, Sequence

from nvcc_evo.driver.cmdline.compileplan import RecordedBuild
from nvcc_evo.driver.cmdline.flags import DEFAULT_PASSES_NOTHING
from nvcc_evo.driver.match.units import written_for
from nvcc_evo.system.say import log
from nvcc_evo.engine.space import Dimension, Genome, SearchSpace

SHIP_CHECK_TIMEOUT = 900.0      # seconds: the ship check's one compile (see ship_check)

if TYPE_CHECKING:
    from nvcc_evo.driver.cmdline.flags import FlagPlan
    from nvcc_evo.driver.toolkit import Toolkit
    from nvcc_evo.cubin.compile import CompileJob
    from nvcc_evo.cubin.sass import KernelFacts
    from nvcc_evo.retune.outcome.choice import Outcome


class BuildStep(Protocol):
    """What a retune asks of a unit's build (RecordedBuild: an nvcc call; KernelBuild: a kernel unit's ptxas step):
    `step`, the flags and ptxas program (None: nvcc's) that reach the target's code with `settings` as its
    entry; `call_values`, what every other architecture's entry of the call sets to one value ({}: none)."""

    def step(self, settings: dict) -> tuple[FlagPlan, str | None]: ...

    def call_values(self) -> dict: ...


class KernelBuild:
    """A kernel unit's build (a PTX its program hands nvcc-evo-ptxas, driver.dropin_ptxas.decide): its one
    ptxas step, asked of the function the drop-in ptxas asks (compileplan.ptx_step), with the record's own
    ptxas options and the ptxas it ran."""

    builds_arch = True

    def __init__(self, task, toolkit: Toolkit, acf_dir: str, environ):
        from nvcc_evo.driver.cmdline.flags import ptxas_values
        self.options = ptxas_values(tuple(task.job.argv))      # (the record's argv: -Xptxas OPTION each, the PTX)
        self.real, self.arch = task.job.ptxas or toolkit.ptxas, task.arch
        self.acf_dir, self.environ = acf_dir, environ

    def step(self, settings: dict) -> tuple[FlagPlan, str | None]:
        from nvcc_evo.driver.cmdline.compileplan import ptx_step
        return ptx_step(settings, self.options, self.real, self.arch, self.environ, self.acf_dir)

    def call_values(self) -> dict:
        return {}


def recorded_build(task, acf_path: Path, toolkit: Toolkit, ptxas: tuple[str, ...]) -> BuildStep:
    """The unit's build as the compile plan sees it (the record the task compiles as; `ptxas`: PtxasList.paths)."""
    from nvcc_evo.driver.cmdline.ptxas import PTXAS_ENV
    environ = {**dict(task.job.env), **dict(task.build_env), PTXAS_ENV: os.pathsep.join(ptxas)}
    if task.unit.is_kernel:
        return KernelBuild(task, toolkit, str(acf_path.parent), environ)
    return RecordedBuild(task.job.argv, task.job.cwd, dict(task.job.env), task.job.source, task.arch,
                         task.unit.globs, acf_path, toolkit, environ)


def why_left_out(build: BuildStep, settings: dict, knob: str) -> str:
    """Why `settings[knob]` would not reach the target's code ("" when it would)."""
    plan, _ = build.step(settings)
    if knob in dict(plan.applied):
        return ""
    reasons = [why for name, why in plan.skipped if name == knob or name.startswith(f"{knob} (")]
    if reasons and reasons[0] == DEFAULT_PASSES_NOTHING:
        return ""
    return reasons[0] if reasons else "the build passes nothing for it"


def _reaches_somewhere(build: BuildStep, base: dict, space: SearchSpace, dim: Dimension, value) -> str:
    """Why `dim = value` reaches the target's code at no point of the space near the baseline ("" when it
    reaches at the baseline or with one other knob changed: a controls file needs its ptxas release)."""
    why = why_left_out(build, {**base, dim.knob: value}, dim.knob)
    for other in (d for d in space.dimensions if d is not dim and not d.pinned and why):
        for choice in (c for c in other.choices if c is not None and c != other.baseline):
            if not why_left_out(build, {**base, other.knob: choice, dim.knob: value}, dim.knob):
                return ""
    return why


def not_shipped(step, settings: dict) -> str:
    """Which of a candidate's knob values its step (a FlagPlan of
    RecordedBuild.step) would not pass, and why ("" when all of them reach)."""
    applied = dict(step.applied)
    lost = []
    for knob, value in settings.items():
        if knob in applied:
            continue
        reasons = [why for name, why in step.skipped if name == knob or name.startswith(f"{knob} (")]
        if reasons and reasons[0] != DEFAULT_PASSES_NOTHING:
            lost.append(f"{knob} = {value}: {reasons[0]}")
    return "; ".join(lost)


def reachable(task, space: SearchSpace, fixed: dict,
              build: BuildStep) -> tuple[SearchSpace, dict, list[str]]:
    """The space with only values the build passes (a dimension left with
    its baseline alone is dropped), the fixed settings the build passes, and
    a line for each knob left out (its values, the reason)."""
    shared = {k: v for k, v in build.call_values().items() if k in {d.knob for d in space.dimensions if not d.pinned}}
    base = {**fixed, **space.baseline().settings(), **shared}
    notes = [f"{k} = {v}: fixed, not searched: the call's other architectures' entries set it, and the call has "
             f"one value for it" for k, v in shared.items()]
    kept = []
    if isinstance(build, RecordedBuild) and not build.builds_arch:     # (a kernel unit's build builds it)
        jit = "".join(f"; {n}" for n in build.base.notes)
        notes.append(f"the recorded build does not build {task.arch} (it builds SASS for "
                     f"{', '.join(build.base.archs) or 'none'}{jit}): its entry reaches no binary of that build")
    for dim in space.dimensions:
        if dim.knob in shared:
            continue
        dropped, reason = [], ""
        for value in dim.choices:
            if value is None or value == dim.baseline or dim.pinned:
                continue
            why = _reaches_somewhere(build, base, space, dim, value)
            if why:
                dropped.append(value)
                reason = reason or why
        choices = tuple(c for c in dim.choices if c not in dropped)
        if dropped:
            shown = "all its values" if len(choices) <= 1 else ", ".join(str(v) for v in dropped)
            notes.append(f"{dim.knob}: {shown} left out of the search: the build would not pass "
                         f"{'it' if len(choices) <= 1 else 'them'} ({reason})")
        if len(choices) > 1 or dim.pinned or not dropped:
            kept.append(replace(dim, choices=choices))
    shipped = dict(shared)
    for knob, value in fixed.items():
        why = why_left_out(build, {**base, knob: value}, knob)
        if why:
            notes.append(f"{knob} = {value} (in its entry, outside the search space) is not kept: the build "
                         f"would not pass it ({why})")
        else:
            shipped[knob] = value
    return replace(space, dimensions=tuple(kept)), shipped, notes


REGISTER_CAPS = ("ptxas.maxrregcount", "nvcc.maxrregcount")


def link_safe(space: SearchSpace, build: BuildStep, compiled) -> tuple[SearchSpace, list[str]]:
    """The space without register caps where the device link would refuse them: a relocatable compile (-dc,
    -rdc=true) whose code calls functions other objects define (the device runtime's, another unit's), as the
    baseline compiles (`compiled()`: its CompileResult, asked only then). nvlink refuses a kernel whose cap is
    under a callee's registers ("entry function 'k' with max regcount of 24 calls function 'f' with regcount
    of 83"), and no compile of the unit alone can know the callee's: a cap the search found here broke the
    project's device link."""
    from nvcc_evo.driver.cmdline.flags import read_facts
    from nvcc_evo.cubin.sass import external_functions
    caps = [d for d in space.dimensions if d.knob in REGISTER_CAPS and not d.pinned
            and any(c is not None and c != d.baseline for c in d.choices)]
    if not caps or not isinstance(build, RecordedBuild) or not read_facts(build.call).relocatable:
        return space, []
    result = compiled()
    callees = external_functions(result.cubin) if result.ok else ()
    if not callees:
        return space, []
    named = ", ".join(callees[:3]) + (f" and {len(callees) - 3} more" if len(callees) > 3 else "")
    notes = [f"{d.knob}: all its values left out of the search: its relocatable code calls functions other "
             f"objects define ({named}), and the device link refuses a kernel whose register cap is under a "
             f"callee's registers" for d in caps]
    return replace(space, dimensions=tuple(d for d in space.dimensions if d not in caps)), notes


def reconfigure_safe(space: SearchSpace, arch: str, compiled) -> tuple[SearchSpace, list[str]]:
    """The space without register caps under the registers the baseline's kernels that move registers
    between their warp groups (setmaxnreg in PTX, USETMAXREG in SASS) launch with (`compiled()`: the
    baseline's CompileResult, asked only where a cap has a value to leave out). Their warp groups share
    out the block's launch allocation (registers x threads) with setmaxnreg.dec/.inc; under a cap that
    allocation is smaller than what .inc asks for, the allocation's retry loop spins for ever and the kernel
    never ends, and ptxas says nothing (a cap of 96 with --override-directive-values on a 384-thread CUTLASS
    kernel of 168 registers: 36,864 registers for warp groups that need 64,512)."""
    from nvcc_evo.cubin.sass import resources, shown_name
    caps = [d for d in space.dimensions if d.knob in REGISTER_CAPS and not d.pinned
            and any(isinstance(c, int) and c != d.baseline for c in d.choices)]
    if not caps:
        return space, []
    result = compiled()
    kernels = resources(result.stderr, arch, result.cubin) if result.ok else []
    inert = inert_caps(space, caps, kernels)
    moving = [k for k in kernels if k.reconfigures]
    if not moving:
        return space, inert
    floor = max(k.registers for k in moving)
    named = ", ".join(f"{shown_name(k.name)} ({k.registers} registers, {k.threads or 'unbounded'} threads)"
                      for k in moving)
    kept, notes = [], []
    for d in space.dimensions:
        under = [c for c in d.choices if d in caps and isinstance(c, int) and c < floor and c != d.baseline]
        if under:
            notes.append(f"{d.knob}: {', '.join(map(str, under))} left out of the search: under the "
                         f"{floor} registers a thread that {named} launches with; its warp groups move registers "
                         f"between them (setmaxnreg), and under a smaller allocation setmaxnreg.inc waits for "
                         f"registers for ever: the kernel would never end (ptxas says nothing)")
            d = replace(d, choices=tuple(c for c in d.choices if c not in under))
        if len(d.choices) > 1 or d.pinned:
            kept.append(d)
    return replace(space, dimensions=tuple(kept)), inert + notes


def inert_caps(space: SearchSpace, caps: list, kernels: Sequence[KernelFacts]) -> list[str]:
    """Where the baseline's kernels have launch bounds (__launch_bounds__: .maxntid), whose register limit
    ptxas keeps over a cap unless --override-directive-values is on in the search, that a cap leaves them
    be, said once: searched without a word, it read as a search of registers that changed no kernel."""
    override = next((d for d in space.dimensions if d.knob == "ptxas.override_directive_values"), None)
    bounded = [k.name for k in kernels if k.threads]
    if not caps or not bounded or (override is not None and True in override.choices):
        return []
    which = "every kernel of the unit" if len(bounded) == len(kernels) else \
        f"{len(bounded)} of its {len(kernels)} kernels"
    named = ", ".join(bounded[:4]) + (" ..." if len(bounded) > 4 else "")
    one = len(bounded) == 1
    verb = "has" if one or len(bounded) == len(kernels) else "have"
    return [f"{', '.join(d.knob for d in caps)}: {which} ({named}) {verb} __launch_bounds__, whose register "
            f"limit ptxas keeps over a cap unless ptxas.override_directive_values "
            f"is true: the cap leaves {'it' if one else 'them'} as {'it is' if one else 'they are'} (searched anyway; "
            f"search ptxas.override_directive_values in {{false, true}} too for it to apply)"]


def say(task, notes: list[str]) -> None:
    for note in notes:
        log(f"{task}: {note}")


# ---------------------------------------------------------------- the ship check
def ship_check(outcome: Outcome, acf_path: Path, toolkit: Toolkit, ptxas: tuple[str, ...],
               build: BuildStep, measured_job: CompileJob) -> str:
    """Why the entry about to be written would not give the build the code that was measured ("" when it
    would): the wrapper's own decision for the recorded call, with that entry in a copy of the ACF beside it
    (where the unit's globs mean the same), compiled for the target; its SASS compared with the measured
    candidate's (`measured_job`: how it was built), as stored, else as that candidate compiles now. Names
    the knob and the difference."""
    from nvcc_evo.cubin.compile import compile_candidate
    from nvcc_evo.cubin.sass import sass_hash
    if not isinstance(build, RecordedBuild):    # (a kernel unit's: the program's own ptxas call, dropin_ptxas.decide)
        return ""
    task, chosen = outcome.task, outcome.chosen
    measured = outcome.measured.digest(chosen)
    written = {s.knob: s.value for s in _settings(outcome)}
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
    if chosen == outcome.space.baseline() and written == _entry_now(task) and program is None \
            and set(dict(step.applied)) <= set(written) | pinned:
        return ""      # the baseline kept, its entry as it was (and read: no other entry's knobs): nothing to compile
    # A genome that compiled already: a timeout of its own, not the candidates' --timeout (on a loaded
    # machine that one compile could run past a short one, and a sound entry would not be written).
    built = compile_candidate(replace(task.job, flags=step.flags, ptxas=program,
                                      timeout=max(task.job.timeout, SHIP_CHECK_TIMEOUT)))
    if not built.ok:
        return f"the build's flags ({' '.join(step.flags) or 'none'}) do not compile: {built.status}"
    code = sass_hash(built.cubin, built.module_id)
    if code == measured or _compiles_now_to(measured_job, code):
        return ""
    added = [f for f in step.flags if f not in measured_job.flags]
    lost = [f for f in measured_job.flags if f not in step.flags]
    return (f"the build's SASS for {task.arch} differs from the measured one (the build adds "
            f"{' '.join(added) or 'nothing more'}, and lacks {' '.join(lost) or 'nothing'} of the measured flags)")


def _never_ends(outcome: Outcome, written: dict, acf_path: Path, build: RecordedBuild, ptxas: tuple[str, ...]) -> str:
    """Why the entry's register cap would hang a kernel ("" where it would not: `hangs`). A cap the search
    left out can still come from a hand-written entry: the chosen build (kerneldiff.compare's comparison) is
    looked at, and only where it has a kernel that moves registers, the build without the caps compiled."""
    from nvcc_evo.cubin.compile import compile_candidate
    compared, task = outcome.kernels, outcome.task
    if compared is None:
        return ""

    def uncapped():
        plain = {k: v for k, v in written.items() if k not in REGISTER_CAPS}
        step, program = _as_built(task, plain, acf_path, build, ptxas)
        return compile_candidate(replace(task.job, flags=step.flags, ptxas=program,
                                         timeout=max(task.job.timeout, SHIP_CHECK_TIMEOUT)))
    return hangs(written, compared.chosen.kernels, uncapped, task.arch)


def hangs(settings: dict, kernels, uncapped, arch: str) -> str:
    """Why the register cap of `settings` would hang one of `kernels` (a build's KernelFacts with the cap):
    one that moves registers between its warp groups (setmaxnreg) left fewer registers a thread than it
    launches with uncapped (`uncapped()`: that build's CompileResult, asked only where such a kernel is
    capped); "" where none would (reconfigure_safe)."""
    from nvcc_evo.cubin.sass import resources, shown_name
    caps = {k: v for k, v in settings.items() if k in REGISTER_CAPS and v is not None}
    moving = [k for k in kernels if k.reconfigures] if caps else []
    if not moving:
        return ""
    plain = uncapped()
    free = {k.name: k.registers for k in resources(plain.stderr, arch, plain.cubin)} if plain.ok else {}
    short = [f"{shown_name(k.name)} gets {k.registers} registers a thread, under the {free[k.name]} it launches "
             f"with uncapped" for k in moving if k.registers < free.get(k.name, 0)]
    if not short:
        return ""
    shown = ", ".join(f"{k} = {v}" for k, v in caps.items())
    return (f"{shown} would hang the kernel: {'; '.join(short)}; its warp groups move registers between them "
            f"(setmaxnreg), and under a smaller allocation setmaxnreg.inc waits for registers for ever "
            f"(ptxas says nothing); leave the cap out of this unit's entry")


def _compiles_now_to(job: CompileJob, code: str) -> bool:
    """Whether the measured candidate, compiled again, is `code`: its stored hash may be an older
    nvcc-evo's, one that kept the process id ending nvcc's module id (cubin.sass.sass_hash)."""
    from nvcc_evo.cubin.compile import compile_candidate
    from nvcc_evo.cubin.sass import sass_hash
    again = compile_candidate(replace(job, timeout=max(job.timeout, SHIP_CHECK_TIMEOUT)))
    return again.ok and sass_hash(again.cubin, again.module_id) == code


def _entry_now(task) -> dict:
    """The knobs of the unit's entry for the target as the ACF held it when the search began."""
    current = task.entry
    return {s.knob: s.value for s in current.settings} if current is not None else {}


def _settings(outcome: Outcome):
    from nvcc_evo.retune.outcome.writeback import settings_of
    return settings_of(outcome)


def _skipped(step, knob: str, value) -> str:
    applied = dict(step.applied)
    if knob in applied and applied[knob] == value:
        return ""
    reasons = [why for name, why in step.skipped if name == knob or name.startswith(f"{knob} (")]
    return reasons[0] if reasons else f"it passes {applied[knob]!r}" if knob in applied else "it passes nothing"


def _as_built(task, written: dict, acf_path: Path, build: RecordedBuild, ptxas: tuple[str, ...]):
    """The wrapper's decision (nvcc_evo.driver.wrapper.decide) for the recorded call with `written` as the
    unit's entry for the target: the target step's FlagPlan and ptxas program."""
    from nvcc_evo.acf import model
    from nvcc_evo.acf.edit.retarget import update_target
    from nvcc_evo.acf.text import read_text
    from nvcc_evo.driver.common import ACF_ENV
    from nvcc_evo.driver.cmdline.compileplan import CompilePlan
    from nvcc_evo.driver.cmdline.ptxas import PTXAS_ENV
    from nvcc_evo.driver.wrapper import decide
    gpu = written_for(task.unit, task.arch, task.built_for)        # (the block write_back writes)
    target = model.Target(task.arch, gpu, tuple(model.Setting(k, v) for k, v in written.items()))
    copy = acf_path.parent / f".nvcc-evo-candidate-{os.getpid()}.acf"
    copy.write_text(update_target(read_text(acf_path), task.unit.globs, target, str(acf_path)))
    try:
        environ = {**{k: v for k, v in os.environ.items() if not k.startswith("NVCC_EVO_")}, **dict(task.job.env),
                   **dict(task.build_env), ACF_ENV: str(copy), PTXAS_ENV: os.pathsep.join(ptxas)}
        decision = decide(list(build.call.argv), Path(task.job.nvcc), environ, Path(task.job.cwd))
    finally:
        copy.unlink(missing_ok=True)
    if decision.flags is None:
        from nvcc_evo.driver.cmdline.flags import FlagPlan
        return FlagPlan((), (), tuple((k, decision.call_plan.passthrough) for k in written)), None
    planned = CompilePlan(decision.flags, decision.per_step, decision.programs)
    key = (build.input, task.arch)
    return planned.step(key), planned.program(key)


def same_code(space: SearchSpace, digests: Mapping[Genome, str]) -> list[str]:
    """A line for each dimension whose values gave the same SASS wherever
    two evaluations differ in it alone (`digests`: genome -> SASS hash): a
    knob that changes nothing here (a define the source fixes, say)."""
    notes = []
    for i, dim in enumerate(space.dimensions):
        if dim.pinned or len(dim.choices) < 2:
            continue
        groups: dict = {}
        for genome, digest in digests.items():
            if digest and genome in space:
                rest = genome.items[:i] + genome.items[i + 1:]
                groups.setdefault(rest, {}).setdefault(genome.items[i][1], set()).add(digest)
        compared = [by_value for by_value in groups.values() if len(by_value) > 1]
        if compared and all(len(set().union(*by_value.values())) == 1 for by_value in compared):
            values = sorted({"default" if v is None else str(v) for g in compared for v in g})
            notes.append(f"{dim.knob}: {', '.join(values)} gave the same SASS in each of {len(compared)} "
                         f"comparison(s): it changes nothing in this unit's code")
    return notes
