"""What reaches the user's binary: a retune searches, reports and writes
only knob values that the unit's recorded build passes to the target's code.

The question goes to the compile plan the wrapper builds with
(nvcc_evo.driver.cmdline.compileplan): before the search, which values of each
dimension the build would pass (`reachable`: the others are left out of the
space, said once per knob with the reason). A unit's build is a `BuildStep`
(an nvcc call's `RecordedBuild`, a kernel unit's `KernelBuild`). The register
caps the device link or a kernel would not survive are left out in
retune.scope.caps; before the write, the ship check (retune.scope.ship) asks
the wrapper's own decision for the recorded call.
"""
from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Mapping, Protocol

from nvcc_evo.driver.cmdline.compileplan import RecordedBuild, ptx_step
from nvcc_evo.driver.cmdline.flags import DEFAULT_PASSES_NOTHING, ptxas_values
from nvcc_evo.driver.cmdline.ptxas import PTXAS_ENV
from nvcc_evo.system.say import log
from nvcc_evo.engine.space import Dimension, Genome, SearchSpace

if TYPE_CHECKING:
    from nvcc_evo.acf.knobs import Scalar
    from nvcc_evo.driver.cmdline.flags import FlagPlan
    from nvcc_evo.driver.toolkit import Toolkit
    from nvcc_evo.retune.scope.tasks import Task


class BuildStep(Protocol):
    """What a retune asks of a unit's build (RecordedBuild: an nvcc call; KernelBuild: a kernel
    unit's ptxas step): `step`, the flags and ptxas program (None: nvcc's) that reach the target's
    code with `settings` as its entry; `call_values`, what every other architecture's entry of the
    call sets to one value ({}: none)."""

    def step(self, settings: dict) -> tuple[FlagPlan, str | None]: ...

    def call_values(self) -> dict: ...


class KernelBuild:
    """A kernel unit's build (a PTX its program hands nvcc-evo-ptxas, driver.dropin_ptxas.decide):
    its one ptxas step, asked of the function the drop-in ptxas asks (compileplan.ptx_step), with
    the record's own ptxas options and the ptxas it ran."""

    builds_arch = True

    def __init__(self, task: Task, toolkit: Toolkit, acf_dir: str,
                 environ: dict[str, str]) -> None:
        # (the record's argv: -Xptxas OPTION each, the PTX)
        self.options = ptxas_values(tuple(task.job.argv))
        self.real, self.arch = task.job.ptxas or toolkit.ptxas, task.arch
        self.acf_dir, self.environ = acf_dir, environ

    def step(self, settings: dict) -> tuple[FlagPlan, str | None]:
        return ptx_step(settings, self.options, self.real, self.arch, self.environ, self.acf_dir)

    def call_values(self) -> dict:
        return {}


def recorded_build(task: Task, acf_path: Path, toolkit: Toolkit,
                   ptxas: tuple[str, ...]) -> BuildStep:
    """The unit's build as the compile plan sees it (the record the task compiles as; `ptxas`:
    PtxasList.paths)."""
    environ = {**dict(task.job.env), **dict(task.build_env), PTXAS_ENV: os.pathsep.join(ptxas)}
    if task.unit.is_kernel:
        return KernelBuild(task, toolkit, str(acf_path.parent), environ)
    job = task.job
    return RecordedBuild(job.argv, job.cwd, dict(job.env), job.source, task.arch, task.unit.globs,
                         acf_path, toolkit, environ)


def why_left_out(build: BuildStep, settings: dict, knob: str) -> str:
    """Why `settings[knob]` would not reach the target's code ("" when it would)."""
    plan, _ = build.step(settings)
    if knob in dict(plan.applied):
        return ""
    reasons = [s.why for s in plan.skipped if s.knob == knob]
    if reasons and reasons[0] == DEFAULT_PASSES_NOTHING:
        return ""
    return reasons[0] if reasons else "the build passes nothing for it"


def _reaches_somewhere(build: BuildStep, base: dict, space: SearchSpace, dim: Dimension,
                       value: Scalar) -> str:
    """Why `dim = value` reaches the target's code at no point of the space near the baseline (""
    when it reaches at the baseline or with one other knob changed: a controls file needs its ptxas
    release)."""
    why = why_left_out(build, {**base, dim.knob: value}, dim.knob)
    for other in (d for d in space.dimensions if d is not dim and not d.pinned and why):
        for choice in (c for c in other.choices if c is not None and c != other.baseline):
            if not why_left_out(build, {**base, other.knob: choice, dim.knob: value}, dim.knob):
                return ""
    return why


def not_shipped(step: FlagPlan, settings: dict) -> str:
    """Which of a candidate's knob values its step (a FlagPlan of
    RecordedBuild.step) would not pass, and why ("" when all of them reach)."""
    applied = dict(step.applied)
    lost = []
    for knob, value in settings.items():
        if knob in applied:
            continue
        reasons = [s.why for s in step.skipped if s.knob == knob]
        if reasons and reasons[0] != DEFAULT_PASSES_NOTHING:
            lost.append(f"{knob} = {value}: {reasons[0]}")
    return "; ".join(lost)


def reachable(task: Task, space: SearchSpace, fixed: dict,
              build: BuildStep) -> tuple[SearchSpace, dict, list[str]]:
    """The space with only values the build passes (a dimension left with
    its baseline alone is dropped), the fixed settings the build passes, and
    a line for each knob left out (its values, the reason)."""
    searched = {d.knob for d in space.dimensions if not d.pinned}
    shared = {k: v for k, v in build.call_values().items() if k in searched}
    base = {**fixed, **space.baseline().settings(), **shared}
    notes = [f"{k} = {v}: fixed, not searched: the call's other architectures' entries set it, and "
             f"the call has one value for it" for k, v in shared.items()]
    kept = []
    if isinstance(build, RecordedBuild) and not build.builds_arch:
        # (a kernel unit's build builds it)
        jit = "".join(f"; {n}" for n in build.base.notes)
        notes.append(f"the recorded build does not build {task.arch} (it builds SASS for "
                     f"{', '.join(build.base.archs) or 'none'}{jit}): its entry reaches no binary "
                     f"of that build")
    for dim in space.dimensions:
        if dim.knob in shared:
            continue
        dropped, reason = _left_out(build, base, space, dim)
        choices = tuple(c for c in dim.choices if c not in dropped)
        if dropped:
            alone = len(choices) <= 1
            shown = "all its values" if alone else ", ".join(str(v) for v in dropped)
            notes.append(f"{dim.knob}: {shown} left out of the search: the build would not pass "
                         f"{'it' if alone else 'them'} ({reason})")
        if len(choices) > 1 or dim.pinned or not dropped:
            kept.append(replace(dim, choices=choices))
    shipped = dict(shared)
    for knob, value in fixed.items():
        why = why_left_out(build, {**base, knob: value}, knob)
        if why:
            notes.append(f"{knob} = {value} (in its entry, outside the search space) is not kept: "
                         f"the build would not pass it ({why})")
        else:
            shipped[knob] = value
    return replace(space, dimensions=tuple(kept)), shipped, notes


def _left_out(build: BuildStep, base: dict, space: SearchSpace,
              dim: Dimension) -> tuple[list, str]:
    """The values of `dim` that reach the target's code nowhere near the baseline, and the first
    one's reason."""
    dropped, reason = [], ""
    for value in dim.choices:
        if value is None or value == dim.baseline or dim.pinned:
            continue
        why = _reaches_somewhere(build, base, space, dim, value)
        if why:
            dropped.append(value)
            reason = reason or why
    return dropped, reason


def say(task: Task, notes: list[str]) -> None:
    for note in notes:
        log(f"{task}: {note}")


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
            notes.append(f"{dim.knob}: {', '.join(values)} gave the same SASS in each of "
                         f"{len(compared)} comparison(s): it changes nothing in this unit's code")
    return notes
