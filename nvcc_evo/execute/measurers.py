"""Which backend measures a retune's candidates: each row of the table of
backends (nvcc_evo.backends) made by the factory its row names (`make_*`
here, given what a retune knows: `Wanted`; `backend_for`); the lanes it
measures on with several GPUs or a cluster are execute.devices'.

Returns a Backend (measure.backend): the function the Evaluator calls per
candidate, the objectives it can answer, whether candidates must be
compiled first, the device name that goes into the results' context, and
the optional capabilities the table says it has.
"""
from __future__ import annotations

import functools
import importlib
import importlib.util
import os
import subprocess
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, Iterable

from nvcc_evo.acf import model, unitpath
from nvcc_evo.acf.bench.command import identity
from nvcc_evo.acf.bench.spec import plan_bench
from nvcc_evo.acf.edit.retarget import update_target
from nvcc_evo.acf.sources import define_values
from nvcc_evo.acf.text import read_text
from nvcc_evo.cubin.compile import CompileJob, CompileResult, SearchTask
from nvcc_evo import backends
from nvcc_evo.errors import EnvironmentProblem, EvoError, UsageError
from nvcc_evo.measure import Confirmation, Measurement, static
from nvcc_evo.measure.backend import Backend, Composed
from nvcc_evo.measure.command.bench import CommandBench
from nvcc_evo.measure.command.metrics import CommandUnit
from nvcc_evo.measure.command.run import Runner
from nvcc_evo.measure.profile.clock import KernelClock, unrecordable
from nvcc_evo.measure.pycuda.bench import OBJECTIVES as GPU_OBJECTIVES, GpuBench
from nvcc_evo.measure.pycuda.devices import gpu_names
from nvcc_evo.measure.pycuda.pool import POOLS
from nvcc_evo.measure.replay import Replay
from nvcc_evo.engine.space import Genome
from nvcc_evo.measure.static import REGISTER_WARPS, with_register_warps
from nvcc_evo.execute.store import Context, Store, require_same_context
from nvcc_evo.system.leftovers import held_file
from nvcc_evo.system.programs import note
from nvcc_evo.system.say import log


@dataclass(frozen=True)
class Wanted:
    """What a backend's factory may use: the search's task, its ACF and results' context, the
    settings that name a backend's inputs (the replay's store, a run's timeout), the space's
    defaults, the flags of a genome, the protocol (`full`: every candidate measured the whole way)
    and the CUDA device."""

    task: SearchTask
    acf_path: Path
    context: Context
    replay: str | None = None
    timeout: float = 300.0
    space_defaults: dict | None = None
    flags_for: Callable | None = None
    full: bool = False
    device: int = 0


# The static backend's steps after its search: the ship check's build of the choice and the
# comparison's builds of baseline and choice (kerneldiff.compare.compare), each about as long as
# the baseline's compile.
STATIC_AFTER_COMPILES = 3


def make_static(wanted: Wanted) -> Backend:
    arch = wanted.task.arch
    first: list[float] = []  # the baseline's compile seconds (the first measured)

    def measure(genome: Genome, flags: tuple[str, ...],
                result: CompileResult | None) -> Measurement:
        assert result is not None      # (a backend that compiles: each candidate comes built)
        launches = _bench_launch(wanted, genome)
        if not first:
            first.append(result.seconds)
            assumed = static.unknown_blocks(result, arch, launches)
            if assumed:
                log(f"{wanted.task}: {assumed}")
        measured = static.measure(result, arch, each_kernel=True, launches=launches)
        return with_register_warps(measured, arch)

    return Composed(measure, static.OBJECTIVES + (REGISTER_WARPS,),
                    reserve=lambda: 1.2 * STATIC_AFTER_COMPILES * first[0] if first else 0.0,
                    describe="static (no GPU timing: registers, spills and other compiler facts)")


def _bench_launch(wanted: Wanted, genome: Genome) -> dict[str, tuple[int, int]]:
    """The kernel a kernel bench launches, with its threads per block and dynamic shared bytes for
    the genome's defines ({} for a command bench, none, or a block the defines cannot size)."""
    bench = wanted.task.unit.bench
    if bench is None or bench.kernel is None:
        return {}
    defines = {**(wanted.space_defaults or {}), **define_values(genome.settings())}
    try:
        plan = plan_bench(bench, defines)
    except (EvoError, ValueError, ArithmeticError, TypeError):
        return {}
    return {plan.kernel: (plan.block[0] * plan.block[1] * plan.block[2], int(plan.shared))}


class CandidateAcf:
    """A copy of the ACF whose target for the task's unit (found by its globs)
    holds the candidate: beside the real one, so that unit globs resolve the
    same; a new file each time (`.nvcc-evo-candidate-PID-XXXX.acf`, never
    through a link; the bench removes it after its runs), locked until the
    next one so that another run's sweep leaves it. While the ACF, as it is
    now, lacks the unit or does not parse (an edit under way), the copy is
    made from the text as the search began."""

    def __init__(self, acf_path: Path, task: SearchTask, at_start: str) -> None:
        self.acf_path, self.task, self.at_start = acf_path, task, at_start
        self.fd = -1

    def __call__(self, genome: Genome) -> Path:
        settings = genome.settings().items()
        target = model.Target(self.task.arch, None, tuple(model.Setting(k, v) for k, v in settings))
        globs, where = self.task.unit.globs, str(self.acf_path)
        try:
            text = update_target(read_text(self.acf_path), globs, target, where)
        except EvoError:  # AcfChanged, AcfError: the search's own ACF still says how to build
            text = update_target(self.at_start, globs, target, where)
        if self.fd >= 0:
            os.close(self.fd)      # the last copy's lock (the bench has removed it)
        path, self.fd = held_file(str(self.acf_path.parent), ".nvcc-evo-candidate-", ".acf")
        data, written = text.encode(), 0
        while written < len(data):
            written += os.write(self.fd, data[written:])
        return Path(path)


def _primary(bench: model.Bench, tune: model.Tune | None) -> str:
    """The metric a command's confirmation judges: the tune block's choice
    (select, else the first objective) where it is a metric, else the first metric."""
    names = [m.name for m in bench.metrics]
    wanted = [tune.select] + list(tune.minimize) if tune is not None else []
    return next((name for name in wanted if name in names), names[0])


def bench_problem(unit: model.Unit, backend: str) -> str | None:
    """Why `backend` cannot run `unit` (no bench block of the form its row of the table names),
    or None."""
    row = backends.row(backend)
    if not row.bench or (unit.bench is not None and getattr(unit.bench, row.bench) is not None):
        return None
    return f"unit {unit} has no `{row.bench_form}` block for the {backend} backend"


def check_benches(tasks: Iterable[SearchTask], backend: str) -> None:
    """Every unit a retune will search has the bench its backend runs: a
    usage error naming all that lack one, before anything is built or run."""
    missing = list(dict.fromkeys(p for p in (bench_problem(t.unit, backend) for t in tasks) if p))
    if missing:
        raise UsageError("; ".join(missing)
                         + " (name the units to retune, or write their bench blocks)")


NO_GPU = ("its runs record the GPU time of the unit's kernels on an NVIDIA GPU: retune it on a "
          "machine with one (--backend static measures compiler facts with none)")


def check_kernel_times(units: Iterable[model.Unit], backend: str, nvcc: str) -> None:
    """Where `backend` runs a command bench with `metric NAME kernels`, that this machine can record
    kernel times (a GPU and CUPTI): EnvironmentProblem naming what is missing and how to get it,
    before anything is built or run."""
    if not backends.row(backend).rebuilds:          # (only a bench command records kernels)
        return
    timed: dict[str, None] = {}             # (each unit once, in order)
    for unit in units:
        commanded = unit.bench.metrics if unit.bench and unit.bench.command else ()
        timed.update({f"unit {unit}: `metric {m.name} kernels`": None
                      for m in commanded if m.kernels})
    problems = unrecordable(os.environ, nvcc, NO_GPU) if timed else []
    if problems:
        raise EnvironmentProblem(f"{', '.join(timed)} cannot record kernel times here: "
                                 + "; and ".join(problems))


def make_command(wanted: Wanted) -> Backend:
    task, acf_path, flags_for = wanted.task, wanted.acf_path, wanted.flags_for
    bench = task.unit.bench
    assert bench is not None                   # (backend_for: the unit has its row's bench block)
    at_start = read_text(acf_path)
    assert flags_for is not None               # (a retune's: devices.measuring hands it one)
    timed = any(m.kernels for m in bench.metrics)
    clock = KernelClock(task.job.nvcc if timed else "", active=timed)
    timeout = bench.timeout.seconds if bench.timeout else wanted.timeout
    unit = CommandUnit(bench, task.unit.globs, task.arch, timeout, triton=task.unit.is_kernel)
    runner = CommandBench(Runner(unit, acf_path, _primary(bench, task.unit.tune), clock=clock),
                          CandidateAcf(acf_path, task, at_start), flags_for)

    def measure(genome: Genome, flags: tuple[str, ...],
                result: CompileResult | None) -> Measurement:
        assert result is not None      # (a backend that compiles: each candidate comes built)
        compiled = static.measure(result, task.arch)
        if not compiled.ok:
            return compiled
        if clock.active:
            clock.learn(genome, result.cubin)  # (its metric: the time of this build's kernels)
        ran = runner.measure(genome, flags)
        return replace(ran, metrics=compiled.metrics + ran.metrics) if ran.ok else ran

    names = tuple(m.name for m in bench.metrics)

    def confirm(baseline: Genome, chosen: Genome,
                build: Callable[[Genome], CompileResult]) -> Confirmation:
        for genome in (baseline, chosen) if clock.active else ():
            if not clock.knows(genome):     # (a genome of the store, never compiled by this run)
                clock.learn(genome, build(genome).cubin)
        return runner.confirm(baseline, chosen, build)

    gpu = command_gpu()
    return Composed(measure, names + static.OBJECTIVES + ("command_time",), confirm=confirm,
                    device=gpu or "cpu", hello={"name": gpu} if gpu else None,
                    end_drift=runner.drift, primary=(runner.primary,), maximize=runner.maximized,
                    reserve=runner.reserve, finish_by=runner.finish_by,
                    build=identity(bench), describe=runner.describe())


def make_replay(wanted: Wanted) -> Backend:
    path, context = wanted.replay, wanted.context
    if not path:
        raise UsageError("--backend replay needs --replay FILE (a results store)")
    replay = Replay(Store(Path(path)).read())
    records = list(replay.answers.values())
    if not records:
        raise UsageError(f"{path} holds no recorded results")
    require_same_context(records, replace(context, backend=records[0].context.backend), path)
    return Composed(replay.measure, static.OBJECTIVES, compiles=False,
                    device=records[0].context.device, describe=f"replay of {path}")


def load_reference(bench: model.Bench, folder: Path) -> Callable | None:
    """The bench's `reference "FILE.py:FUNCTION"`, imported from beside the ACF."""
    if bench.reference is None:
        return None
    path, _, name = bench.reference.text.rpartition(":")
    # (the check says so)
    if unitpath.path_problem(path) or unitpath.inside(folder / path, folder) is None:
        raise UsageError(f"reference file '{path}' lies outside the ACF's folder {folder}")
    spec = importlib.util.spec_from_file_location(f"nvcc_evo_reference_{Path(path).stem}",
                                                  folder / path)
    assert spec is not None and spec.loader is not None    # (a .py file: the check says so)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return getattr(module, name)


ENERGY_METRICS = ("energy", "power")


def uses_energy(tune: model.Tune | None) -> bool:
    """Whether an objective, a constraint or the select rule names energy or power."""
    if tune is None:
        return False
    constrained = {c.metric for c in tune.require + tune.select_where}
    named = set(tune.minimize) | constrained | {tune.select}
    return bool(named & set(ENERGY_METRICS))


def make_pycuda(wanted: Wanted) -> Backend:
    task, full, space_defaults = wanted.task, wanted.full, wanted.space_defaults or {}
    bench = task.unit.bench
    assert bench is not None                   # (backend_for: the unit has its row's bench block)
    pool = POOLS.get(wanted.device)
    defines = lambda genome: {**space_defaults, **define_values(genome.settings())}
    with_energy = full or uses_energy(task.unit.tune)
    gpu = GpuBench(bench, pool, task.arch, defines, energy=with_energy,
                   expected_fn=load_reference(bench, wanted.acf_path.parent),
                   settle=not full, timeout=wanted.timeout)
    gpu.prefetch(space_defaults)        # the baseline's reference, while the baseline builds
    if not with_energy:
        energy = "energy not measured: the tune block does not name it"
    elif pool.hello.get("nvml"):
        energy = "energy from NVML"
    else:
        energy = "no NVML: energy dropped"
    return Composed(gpu.measure, GPU_OBJECTIVES, device=pool.hello["name"], hello=pool.hello,
                    confirm=gpu.confirm, drift=gpu.drift,
                    race=None if full else gpu.race_against, fresh_baseline=True,
                    reserve=gpu.reserve,
                    describe=f"pycuda on {pool.hello['name']} (sm {pool.hello['cc']}; {energy})")


@functools.lru_cache(maxsize=1)
def command_gpu() -> str:
    """The GPU model a bench command runs on, where that is plain: every visible GPU one model
    (PyCUDA's names, which follow CUDA_VISIBLE_DEVICES, else nvidia-smi's); "" with none, or several
    models (which one the command takes is its own affair). Its results are kept under it, its
    entries name it."""
    names = gpu_names()
    if not names:
        note("nvidia-smi", "the GPU a bench command runs on")
        try:
            out = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
                                 capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.SubprocessError):
            return ""
        if out.returncode != 0:
            return ""
        names = [line.strip() for line in out.stdout.splitlines() if line.strip()]
    return names[0] if names and len(set(names)) == 1 else ""


def factory_of(backend: str) -> Callable[[Wanted], Backend]:
    """The function that makes the backend named `backend`: the one its row of the table names."""
    row = backends.row(backend)
    module, _, name = row.factory.partition(":")
    factory = getattr(importlib.import_module(module), name, None) if module else None
    if factory is None:
        raise EnvironmentProblem(f"backend '{backend}' is not available in this build of nvcc-evo")
    return factory


def backend_for(backend: str, wanted: Wanted) -> Backend:
    """The backend named `backend` (a row of the table), made by its factory, for a unit that has
    the bench block its row runs."""
    factory = factory_of(backend)
    problem = bench_problem(wanted.task.unit, backend)
    if problem:
        raise UsageError(problem)
    return factory(wanted)
