"""Where a retune's candidates are measured: the backend `auto` stands for,
the GPUs (one, or a lane per GPU or per cluster worker, each calibrated on
the baseline), the model its results are kept under (lane 0's), and the
measuring processes ended after it.

`measuring` makes the retune's Backend by its row's factory
(measurers.backend_for) for each lane.
"""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Callable, NamedTuple

from nvcc_evo import backends
from nvcc_evo.cubin.compile import CompileJob, SearchTask, compile_candidate
from nvcc_evo.driver.specs import Gpus
from nvcc_evo.errors import UsageError
from nvcc_evo.measure.backend import Backend
from nvcc_evo.measure.pycuda.devices import gpu_available, gpu_names
from nvcc_evo.measure.pycuda.pool import POOLS
from nvcc_evo.engine.space import Genome
from nvcc_evo.execute.cluster import Cluster
from nvcc_evo.execute.lanes import Lane, LaneSet, choose_gpus
from nvcc_evo.execute.measurers import Wanted, backend_for, command_gpu
from nvcc_evo.execute.store import Context
from nvcc_evo.system.say import log


class Measuring(NamedTuple):
    """What a retune's options say of how its candidates are measured
    (retune.scope.options.Options.measuring): the backend (resolved), the CUDA device and the
    GPUs, the replay's store, a run's timeout, the protocol (`full`: every candidate measured the
    whole way)."""

    backend: str
    device: int = 0
    gpus: Gpus | None = None
    replay: str | None = None
    timeout: float = 300.0
    full: bool = False


def close_pool() -> None:
    """The retune's measuring processes ended (measure.pycuda.pool.POOLS)."""
    POOLS.close()


def gpu_arch(device: int, cluster: Cluster | None = None) -> str:
    """The SASS architecture of the GPU measured on (lane 0's)."""
    return cluster.gpu_arch() if cluster is not None else POOLS.get(device).hello["arch"]


def measuring_gpu(asked: Measuring, dry_run: bool, cluster: Cluster | None = None) -> str:
    """The GPU model the pycuda backend measures on (lane 0's), or a bench command runs on
    (command_gpu); "" for a backend that measures on none (an entry measured on another model is
    stale: retune.scope.staleness.stale_reasons). Asked in a child, as gpu_available does (a dry run
    starts no measuring process), or of the cluster's first GPU."""
    row = backends.row(asked.backend)
    if row.rebuilds:                 # a whole program runs, on whichever GPU it finds
        return command_gpu()
    if not row.needs_gpu:
        return ""
    if cluster is not None:
        return "" if dry_run else str(cluster.gpu_actors()[0][1].get("name", ""))
    names = gpu_names()
    return names[asked.device] if 0 <= asked.device < len(names) else ""


def resolve_backend(backend: str, cluster: Cluster | None = None) -> str:
    """`auto`: the GPU when PyCUDA and a device are there (on the cluster, a
    GPU), else static."""
    if backend != backends.AUTO:
        return backend
    if cluster is not None:
        return cluster.backend(backend)
    return backends.auto_choice(gpu=gpu_available())


def pycuda_devices(gpus: Gpus | None, first: int) -> list[int]:
    """The CUDA devices a pycuda retune measures on: `retune.gpus` among the
    visible ones (default: every one of the model of `retune.device`, which
    is lane 0)."""
    names = gpu_names()
    if not names:
        return [first]
    if not 0 <= first < len(names):
        raise UsageError(f"--device {first}: {len(names)} GPU(s) visible")
    chosen = choose_gpus(gpus, names, first)
    others = [f"{i} ({names[i]})" for i in range(len(names))
              if i not in chosen and names[i] != names[first]]
    if others:
        log(f"GPU(s) {', '.join(others)} left out: not the model of device {first} "
            f"({names[first]}); GPUs of different models are never mixed in one search")
    return chosen


def wanted_by(asked: Measuring, task: SearchTask, acf_path: Path, context: Context,
              space_defaults: dict | None, flags_for: Callable | None) -> Wanted:
    """What a retune's options give a backend's factory."""
    return Wanted(task, acf_path, context, asked.replay, asked.timeout, space_defaults, flags_for,
                  asked.full, asked.device)


def measuring(asked: Measuring, task: SearchTask, acf_path: Path, context: Context,
              space_defaults: dict, flags_for: Callable | None,
              cluster: Cluster | None = None) -> tuple[Backend, LaneSet | None]:
    """The retune's Backend and, with several GPUs (or `retune.gpus` named,
    even one) or a cluster, the lanes it measures on (their `measure` is the
    Backend's)."""
    wanted = wanted_by(asked, task, acf_path, context, space_defaults, flags_for)
    if cluster is not None:
        lanes = cluster.lanes(asked.backend, wanted)
        return lanes.measurer(), lanes
    on_gpu = backends.row(asked.backend).needs_gpu
    devices = pycuda_devices(asked.gpus, asked.device) if on_gpu else []
    if not devices or (len(devices) == 1 and asked.gpus is None):   # no GPU, or one: as always
        device = devices[0] if devices else asked.device
        return backend_for(asked.backend, replace(wanted, device=device)), None
    lanes = LaneSet([Lane(i, backend_for(asked.backend, replace(wanted, device=device)),
                          f"GPU {device}") for i, device in enumerate(devices)])
    return lanes.measurer(), lanes


def calibrate(lanes: LaneSet | None, measurer: Backend, baseline: Genome, job: CompileJob) -> None:
    """Each GPU lane's baseline, timed on every lane at once (lanes.LaneSet.calibrate)."""
    if lanes is None or len(lanes) < 2 or measurer.hello is None:
        return
    result = compile_candidate(job)
    if not result.ok:
        return
    names = [lane.name for lane in lanes.lanes]
    runs = lanes.calibrate(baseline, job.flags, result)
    times = ", ".join(f"{name} {run.get('runtime'):.4g} us"
                      for name, run in zip(names, runs) if run.ok)
    log(f"the baseline on each lane: {times}; runtimes scaled to {lanes.lanes[0].name}'s"
        + "".join(f"; {note}" for note in lanes.notes))
