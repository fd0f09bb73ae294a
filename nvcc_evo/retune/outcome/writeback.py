"""A retune's choice into the ACF: the settings and provenance of a target
block, written by identity.

The unit is found by its globs in the ACF as it is at write time, under the
file's lock (acf.edit.write.rewrite), never by the position it had when the run
began; a unit gone, or with other pins or another search space than the
search ran with, gets nothing (AcfChanged). One retune of an ACF runs at a
time (`one_retune_at_a_time`).
"""
from __future__ import annotations

import os
import time
from contextlib import ExitStack
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from nvcc_evo.acf import model
from nvcc_evo.acf.edit.retarget import find_unit, replace_target
from nvcc_evo.acf.parse import parse_text
from nvcc_evo.acf.edit.write import rewrite, writable
from nvcc_evo.driver.match.builds import keep_sources, sources_read
from nvcc_evo.driver.match.stale import SPACE_CHANGED
from nvcc_evo.driver.match.units import unit_outputs, written_for
from nvcc_evo.errors import AcfChanged, EnvironmentProblem
from nvcc_evo.system.say import log
from nvcc_evo.engine.space import Genome, SearchSpace
from nvcc_evo.kerneldiff.view import demangled
from nvcc_evo.measure.static import KERNEL_WARPS, REGISTER_WARPS
from nvcc_evo.system.locks import Wait, lock_file, locked

if TYPE_CHECKING:
    from nvcc_evo.driver.toolkit import Toolkit
    from nvcc_evo.retune.outcome.choice import Outcome
    from nvcc_evo.retune.scope.tasks import Task


def fixed_settings(task: Task, space: SearchSpace) -> dict:
    """Knobs set in the current target but outside the search space stay set."""
    searched = {d.knob for d in space.dimensions}
    current = task.entry
    settings = current.settings if current else ()
    return {s.knob: s.value for s in settings if s.knob not in searched}


def current_genome(task: Task, space: SearchSpace) -> Genome | None:
    """The unit's entry for the task's architecture as a genome of `space`."""
    current = task.entry
    if current is None:
        return None
    return space.genome({s.knob: s.value for s in current.settings})


def settings_of(outcome: Outcome) -> tuple[model.Setting, ...]:
    """Values a build must pass: not pinned (pins apply anyway), not the baseline."""
    chosen = []
    for (name, value), dim in zip(outcome.chosen.items, outcome.space.dimensions):
        if value is not None and not dim.pinned and value != dim.baseline:
            chosen.append(model.Setting(name, value))
    # (those the build passes)
    chosen.extend(model.Setting(k, v) for k, v in outcome.fixed.items())
    return tuple(chosen)


class Writing(NamedTuple):
    """What the write into the ACF is given of a retune's options, made once (retune.run): the
    backend and seed its provenance names, and the wait for the ACF's lock."""

    backend: str
    seed: int
    wait: Wait


def provenance(outcome: Outcome, toolkit: Toolkit,
               writing: Writing) -> tuple[model.Record, ...]:
    t = outcome.measured.tally
    records = [model.Record("fingerprint", outcome.task.fingerprint),
               model.Record("toolkit", outcome.task.toolkit(toolkit)),
               model.Record("space_digest", outcome.task.unit.space_digest),
               model.Record("tune_digest", outcome.task.unit.tune_digest),
               model.Record("settings_digest", model.settings_digest(settings_of(outcome)))]
    if outcome.task.build:
        records.append(model.Record("build", outcome.task.build))
    hello = outcome.hello
    if hello:       # (a bench command's: the model alone, see execute.measurers.command_gpu)
        records += [model.Record(key, str(hello[field]) if key == "driver" else hello[field])
                    for key, field in (("gpu", "name"), ("cc", "cc"), ("driver", "driver"))
                    if field in hello]
    records += [model.Record("backend", writing.backend),
                model.Record("date", time.strftime("%Y-%m-%d")),
                model.Record("seed", writing.seed),
                model.Record("evaluations", t.evaluated + t.resumed),
                model.Record("reused", t.reused)]
    records += [model.Record("resumed", t.resumed)] if t.resumed else []
    records += [model.Record("search_seconds", round(outcome.seconds, 1))]
    whole = lambda v: int(v) if float(v).is_integer() else float(f"{v:.5g}")
    measured_too = tuple(m for m in ("runtime", "energy") if m in dict(outcome.baseline.metrics))
    written = tuple("registers" if m == REGISTER_WARPS else m
                    for m in outcome.goal.minimize + (outcome.goal.select,))
    # (the warps per SM registers allow: not a key)
    for metric in dict.fromkeys(written + measured_too):
        for side, measured in (("baseline", outcome.baseline),
                               ("tuned", outcome.chosen_measurement)):
            value, spread = measured.get(metric), dict(measured.spreads).get(metric)
            if value == float("inf"):
                continue
            records.append(model.Record(f"{side}.{metric}", whole(value),
                                        float(f"{value * spread:.3g}") if spread is not None
                                        else None))
    stats = outcome.verification
    if stats is not None:
        records += [model.Record("test", stats.test),
                    model.Record("p_value", float(f"{stats.p_value:.3g}")),
                    model.Record("effect_size", round(stats.effect, 4)),
                    model.Record("significant", stats.significant)]
        if stats.rounds:
            records.append(model.Record("rounds", stats.rounds))
    runs = outcome.baseline.get("runs", 0)
    if runs:
        records.append(model.Record("repeats", int(runs)))
    records.append(model.Record("verdict", outcome.verdict))
    return tuple(records)


def write_back(acf_path: Path, outcome: Outcome, toolkit: Toolkit, writing: Writing) -> None:
    """Into the unit with the task's globs in the ACF as it is at write time,
    under its lock. AcfChanged (nothing written) when that unit is gone, or
    its pins or search space are not those the search ran with: the result
    would be stale."""
    task = outcome.task
    settings, records = settings_of(outcome), provenance(outcome, toolkit, writing)

    def update(text: str) -> str:
        file = parse_text(text, str(acf_path))
        unit = find_unit(file, task.unit.globs)
        if unit.space_digest != task.unit.space_digest:
            raise AcfChanged(f"its {SPACE_CHANGED} since the search began: the result is stale")
        gpu = written_for(unit, task.arch, task.built_for)   # (the block the recorded build reads)
        return replace_target(text, file, unit, model.Target(task.arch, gpu, settings, records))

    rewrite(acf_path, update, writing.wait)
    outcome.written = True
    # (the files its fingerprint read, so that "source changed" can name them later)
    job = task.job
    read = sources_read(task.source, job.argv, job.env, job.cwd, acf_path.parent)
    keep_sources(acf_path.parent, task.fingerprint, read)


def knobs_changed(outcome: Outcome) -> bool:
    """Whether the entry written gives a build other knobs than the entry it
    replaced (none: an empty one); provenance alone changes no binary."""
    before = outcome.task.entry
    held = {s.knob: s.value for s in before.settings} if before is not None else {}
    return {s.knob: s.value for s in settings_of(outcome)} != held


def say_rebuild(acf_path: Path, outcomes: list[Outcome], redated: bool = False,
                shown: int = 4) -> None:
    """What to rebuild to use what was written, where a knob changed (a kept
    baseline, or the knobs the entry held, change no binary): a build system
    compares sources and objects, not the ACF, and says "up to date" unless
    told that every covered object depends on it (`redated`: the command
    backend left those outputs dated 1970, so any build compiles them again)."""
    written = [o for o in outcomes if o.written and not o.settled and knobs_changed(o)]
    kernels = [o for o in written if o.task.unit.is_kernel]
    if kernels:
        names = ", ".join(sorted({str(o.task.unit) for o in kernels}))
        log(f"to use the new entries of {names}: run the program through the drop-in ptxas as "
            f"before (TRITON_PTXAS_PATH=nvcc-evo-ptxas, and for sm_100 and later "
            f"TRITON_PTXAS_BLACKWELL_PATH=nvcc-evo-ptxas-blackwell); its --version answer names "
            f"the entries that apply, so Triton's cache compiles those kernels again. "
            f"torch.compile's kernels come from TorchInductor's own cache, whose key holds no "
            f"ptxas: empty TORCHINDUCTOR_CACHE_DIR (default /tmp/torchinductor_$USER) once, or run "
            f"with TORCH_COMPILE_CACHE_KEY_TAG set to the last line of `nvcc-evo-ptxas --version` "
            f"in this folder")
    written = [o for o in written if not o.task.unit.is_kernel]
    if not written:
        return
    outputs = sorted({p for o in written
                      for p in unit_outputs(acf_path, o.task.unit.globs, o.task.arch)})
    rel = lambda path: (os.path.relpath(path) if not os.path.relpath(path).startswith("../..")
                        else str(path))
    acf = rel(acf_path)
    if not outputs:
        log("to use the new entries, build through nvcc-evo (no compile of these units is recorded "
            "yet)")
        return
    more = f" and {len(outputs) - shown} more" if len(outputs) > shown else ""
    listed = ", ".join(rel(p) for p in outputs[:shown]) + more
    if redated:
        log(f"to use the new entries, build again: {listed} were re-dated, so the build compiles "
            "them")
        return
    depends = f"APPEND PROPERTY OBJECT_DEPENDS {os.path.abspath(acf_path)}"
    log(f"to use the new entries, rebuild what your build compiled before them: {listed}.\n"
        f"  A build rebuilds them on an ACF change only if they depend on it; else it says "
        f"\"up to date\":\n"
        f"    Make:  $(CUDA_OBJECTS): {acf}\n"
        f"    CMake: set_property(SOURCE ${{CUDA_SOURCES}} {depends})\n"
        f"  or once by hand: make -B, cmake --build . --clean-first, or remove those files")


def verdict_of(outcome: Outcome) -> str:
    if outcome.settled:
        return outcome.settled
    if not outcome.baseline.ok:
        return f"baseline failed ({outcome.baseline.status}); nothing written"
    if outcome.rejected:
        return f"baseline kept: {outcome.rejected}"
    if outcome.chosen == outcome.space.baseline():
        return "baseline kept: no candidate beat it"
    changes, worse = [], False
    for metric in outcome.goal.minimize:
        before, after = outcome.baseline.get(metric), outcome.chosen_measurement.get(metric)
        if after != before:
            changes.append(f"{metric} {before:g} -> {after:g}")
            worse = worse or not outcome.goal.better(metric, after, before)
    hurt = kernels_made_worse(outcome)
    worse_kernels = f"; worse kernels: {hurt}" if hurt else ""
    if not changes:
        return "same scores; chosen by the selection rule" + worse_kernels
    # (a point of the front may give up one objective for another, or one kernel for the unit's
    # worst: not an improvement in every one)
    return ("traded " if worse or hurt else "improved ") + ", ".join(changes) + worse_kernels


# KernelFacts' own, per kernel
KERNEL_METRICS = ("registers", "spills", "stack", "shared", "instructions")


def kernels_made_worse(outcome: Outcome) -> str:
    """Each kernel the choice makes worse on a minimised objective, as the comparison of the two
    builds (kerneldiff.compare) and the per-kernel warps per SM say it ("" where none): the unit's
    number alone (its worst kernel's, or a sum) can hide one kernel's loss ("registers 168 -> 96"
    while another went 34 -> 56)."""
    found: dict[str, list[str]] = {}
    if outcome.kernels is not None:
        for name, base, mine in outcome.kernels.pairs():
            for metric in (m for m in outcome.goal.minimize
                           if m in KERNEL_METRICS and base and mine):
                before, after = getattr(base, metric), getattr(mine, metric)
                if after > before:
                    found.setdefault(name, []).append(f"{metric} {before:g} -> {after:g}")
    if REGISTER_WARPS in outcome.goal.minimize:
        base_metrics = dict(outcome.baseline.metrics)
        mine_metrics = dict(outcome.chosen_measurement.metrics)
        for key, before in base_metrics.items():
            after = mine_metrics.get(key, before)
            if key.startswith(KERNEL_WARPS) and after < before:
                found.setdefault(key[len(KERNEL_WARPS):], []).append(
                    f"warps per SM {before:g} -> {after:g}")
    names = demangled(list(found))
    return "; ".join(f"{names[n].split('(')[0]} {', '.join(said)}" for n, said in found.items())


def one_retune_at_a_time(acf_path: Path, dry_run: bool, wait: Wait) -> ExitStack:
    """The run's hold on the ACF (a lock file in `.nvcc-evo/locks/` beside
    it): a second retune of it says who holds it and waits, at most as long
    as `wait` says (then EnvironmentProblem); a dry run writes nothing and
    takes no turn. A read-only ACF stops the run here, before any search."""
    held = ExitStack()
    if not dry_run:
        real = writable(acf_path)
        lock = lock_file(acf_path.parent, f"retune-{real.name}.lock")
        try:
            held.enter_context(locked(real, lock, wait, f"another retune of {acf_path} is running"))
        except TimeoutError as error:
            raise EnvironmentProblem(str(error)) from None
        except OSError as error:   # a link committed in its place: refused, its target untouched
            said = error.strerror or error
            raise EnvironmentProblem(f"cannot take the retune lock {lock}: {said}") from None
    return held
