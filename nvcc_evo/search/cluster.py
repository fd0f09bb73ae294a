"""The Ray backend of a retune (`--cluster ray://HEAD:PORT`, `local`,
`local:N`; the setting `retune.cluster`): compiles as tasks on the
cluster's CPUs, measurements on its GPUs (one actor per GPU, holding its own
measuring process). The static, replay and command backends measure here,
in the driver: a static measurement reads the ptxas report the compile task
sent back (0.2 ms), where a Ray task's round trip took 0.3-0.7 s per
candidate on a 2-core machine (benchmarks/parallel.py), and a bench command
builds in this project.

Ray is an optional extra (`nvcc-evo[cluster]`), imported only here and only
when a cluster is named. What travels is the compile job and then the
cubin: a compile task returns its CompileResult (the cubin's bytes), which
the driver hashes (the SASS dedupe) and hands to a measuring lane
(search.lanes). With `ray://`, the CPU nodes compile from the same paths as
this machine (the project on a shared file system) and need nvcc-evo and the
toolkit installed; the GPU nodes need only nvcc-evo and PyCUDA.

A worker or node that dies: Ray retries its task once (`RETRIES`); then the
compile is a result with status `lost`, and a measuring actor that is gone
is a lost lane, its candidate measured on another lane or recorded `lost`.
Never a crash of the retune.
"""
from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

from nvcc_evo.driver.candidate import CompileResult, compile_candidate, front_end, ptxas_only
from nvcc_evo.errors import EnvironmentProblem, UsageError
from nvcc_evo.search.lanes import LOST, Lane, LaneLost, LaneSet

RETRIES = 1          # Ray's own retries of a task whose worker died, before it counts as lost


def parse(spec: str) -> tuple[str | None, int | None]:
    """`local` / `local:N` -> (None, N or None: this machine's cores);
    `ray://HEAD:PORT` -> (the address, None)."""
    text = spec.strip()
    if text == "local":
        return None, None
    if text.startswith("local:"):
        count = text.partition(":")[2]
        if not count.isdigit() or int(count) < 1:
            raise UsageError(f"--cluster {spec}: local:N takes a number of workers, at least 1")
        return None, int(count)
    if text.startswith("ray://") and len(text) > len("ray://"):
        return text, None
    raise UsageError(f"--cluster {spec}: expected ray://HEAD:PORT, local or local:N")


def open_cluster(spec: str | None, dry_run: bool) -> "Cluster | None":
    """The Ray cluster `retune.cluster` names, connected (None: this machine; a dry run connects to none)."""
    return connect(spec) if spec and not dry_run else None


def connect(spec: str) -> "Cluster":
    address, workers = parse(spec)
    try:
        import ray
    except ImportError:
        raise EnvironmentProblem(f"--cluster {spec} needs Ray, which is not installed here: "
                                 "pip install 'nvcc-evo[cluster]'") from None
    if address is None:     # "local": a Ray of its own, never one that RAY_ADDRESS or `ray start` left running
        ray.init(address="local", num_cpus=workers or os.cpu_count() or 1, num_gpus=_local_gpus(),
                 include_dashboard=False, log_to_driver=False, logging_level="ERROR", configure_logging=False)
    else:
        ray.init(address=address, log_to_driver=False, logging_level="ERROR", configure_logging=False)
    return Cluster(ray, spec)


def _local_gpus() -> int:
    from nvcc_evo.measure.gpu import gpu_names
    return len(gpu_names())


# ---------------------------------------------------------------- what runs on the workers
def compile_remote(job) -> CompileResult:
    """A candidate compiled in full on a worker."""
    return compile_candidate(job)


def reuse_remote(job, first: list) -> CompileResult:
    """A candidate built from the PTX of the first candidate of its front end
    (`first`: that compile's ObjectRef, in a list so that Ray does not wait
    for it: a lost first compile means a full compile here, not a second
    loss); only ptxas runs, as driver.candidate.PtxCache does on one machine."""
    import ray
    try:
        made = ray.get(first[0])
    except ray.exceptions.RayError:
        made = None
    if made is not None and made.ok and made.ptx:
        result = ptxas_only(job, made.ptx)
        if result.status != "no-ptxas-step":
            return result
    return compile_candidate(job)


class MeasuringActor:
    """One GPU's lane: a Measurer made on that GPU (its own measuring process and baseline)."""

    def __init__(self, factory):
        self.measurer = factory()

    def describe(self) -> tuple:
        m = self.measurer
        return m.objectives, m.device, m.describe, m.hello, m.primary, m.maximize, m.build, m.race is not None

    def measure(self, genome, flags, result):
        return self.measurer.measure(genome, flags, result)

    def race(self, median: float, spread: float) -> None:
        self.measurer.race(median, spread)

    def drift(self):
        return self.measurer.drift()

    def confirm(self, baseline, chosen):
        return self.measurer.confirm(baseline, chosen)


def gpu_hello() -> dict:
    from nvcc_evo.search.measurers import close_pool, gpu_pool
    try:
        return dict(gpu_pool(0).hello)
    finally:
        close_pool()


# ---------------------------------------------------------------- the driver's side
class Cluster:
    def __init__(self, ray, spec: str):
        self.ray, self.spec = ray, spec
        self.compile_task = ray.remote(num_cpus=1, max_retries=RETRIES)(compile_remote)
        self.reuse_task = ray.remote(num_cpus=1, max_retries=RETRIES)(reuse_remote)
        self.actors: list = []

    def resources(self) -> dict:
        return self.ray.cluster_resources()

    @property
    def workers(self) -> int:
        return max(1, int(self.resources().get("CPU", 1)))

    @property
    def gpus(self) -> int:
        return int(self.resources().get("GPU", 0))

    def backend(self, backend: str) -> str:
        """`auto`: pycuda where the cluster has GPUs, else static."""
        return backend if backend != "auto" else ("pycuda" if self.gpus else "static")

    def gpu_arch(self) -> str:
        if not self.gpus:
            raise EnvironmentProblem(f"the cluster {self.spec} has no GPU for the pycuda backend")
        return self.ray.get(self.ray.remote(num_gpus=1, max_retries=RETRIES)(gpu_hello).remote())["arch"]

    def compiler(self, reuse: bool) -> "RayCompiler":
        return RayCompiler(self, reuse)

    def lanes(self, backend: str, task, acf_path: Path, context, options, space_defaults: dict,
              flags_for) -> LaneSet:
        from nvcc_evo.search import measurers
        full = options.protocol == "full"
        if backend != "pycuda":          # static, replay, command: measured here (see the module's docstring)
            made = measurers.measurer_for(backend, task, acf_path, context, options.replay, options.timeout,
                                          space_defaults, flags_for, full=full)
            return LaneSet([Lane(0, replace(made, describe=f"{made.describe}; compiles on {self.workers} Ray "
                                                              f"worker(s)"), "this machine")])
        if not self.gpus:
            raise EnvironmentProblem(f"the cluster {self.spec} has no GPU for the pycuda backend")
        factory = _gpu_factory(task, acf_path, context, options.timeout, space_defaults, full)
        return self.actor_lanes(factory, self.gpus, num_gpus=1)

    def actor_lanes(self, factory, count: int, num_gpus: float = 0) -> LaneSet:
        """One measuring actor per lane, each holding a Measurer made by `factory` there."""
        actor = self.ray.remote(num_cpus=0, num_gpus=num_gpus, max_restarts=0)(MeasuringActor)
        made = [actor.remote(factory) for _ in range(count)]
        self.actors += made
        lanes = []
        for i, handle in enumerate(made):
            objectives, device, describe, hello, primary, maximize, build, races = self._get(handle.describe.remote())
            lanes.append(Lane(i, _actor_measurer(self, handle, objectives, device, describe, hello, primary,
                                                 maximize, build, races), f"ray actor {i} ({device})"))
        models = {lane.measurer.device for lane in lanes}
        if len(models) > 1:               # never mixed in one comparison: lane 0's model only
            lanes = [lane for lane in lanes if lane.measurer.device == lanes[0].measurer.device]
        return LaneSet([Lane(i, lane.measurer, lane.name) for i, lane in enumerate(lanes)])

    def _get(self, ref):
        """A task's or actor call's value; a dead worker, actor or node is LaneLost."""
        try:
            return self.ray.get(ref)
        except self.ray.exceptions.RayTaskError:
            raise
        except self.ray.exceptions.RayError as error:
            raise LaneLost(f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}") from None

    def close(self) -> None:
        for handle in self.actors:
            self.ray.kill(handle)
        self.actors = []
        self.ray.shutdown()


def _gpu_factory(task, acf_path: Path, context, timeout: float, space_defaults: dict, full: bool):
    """What an actor calls to make its GPU's Measurer (device 0: Ray gives each actor its own GPU)."""
    def make():
        from nvcc_evo.search.measurers import measurer_for
        return measurer_for("pycuda", task, acf_path, context, None, timeout, space_defaults, None, full=full,
                            device=0)
    return make


def _actor_measurer(cluster: Cluster, handle, objectives, device, describe, hello, primary, maximize, build,
                    races):
    from nvcc_evo.measure import Measurer
    get = cluster._get
    return Measurer(lambda genome, flags, result: get(handle.measure.remote(genome, flags, result)), objectives,
                    device=device, describe=f"{describe} on the cluster", hello=hello,
                    confirm=(lambda baseline, chosen: get(handle.confirm.remote(baseline, chosen)))
                    if hello is not None else None,
                    drift=lambda: get(handle.drift.remote()), primary=primary, maximize=maximize, build=build,
                    race=(lambda median, spread: handle.race.remote(median, spread)) if races else None)


class RayCompiler:
    """Compiler's interface (submit, result, close) over compile tasks on the
    cluster's CPUs. With `reuse` (the fast protocol), the first candidate of
    each front end compiles in full and the others of that front end run only
    ptxas on its PTX, whichever worker they land on (`reuse_remote`)."""

    def __init__(self, cluster: Cluster, reuse: bool):
        self.cluster, self.reuse, self.refs = cluster, reuse, []
        self.fronts: dict = {}              # front end -> the ObjectRef of its first, full compile

    def submit(self, jobs: list) -> list:
        refs = []
        for job in jobs:
            key = front_end(job) if self.reuse else None
            if key in self.fronts:
                refs.append(self.cluster.reuse_task.remote(job, [self.fronts[key]]))
                continue
            refs.append(self.cluster.compile_task.remote(job))
            if key is not None:
                self.fronts[key] = refs[-1]
        self.refs += refs
        return refs

    def result(self, ref) -> CompileResult:
        try:
            return self.cluster._get(ref)
        except LaneLost as lost:
            return CompileResult(LOST, 0.0, f"the compile's worker was lost ({lost}), after {RETRIES} retry")
        except BaseException:
            self.close(cancel=True)
            raise

    def close(self, cancel: bool = False) -> None:
        if cancel:
            for ref in self.refs:
                try:
                    self.cluster.ray.cancel(ref, force=True)
                except Exception:      # already finished, or its worker is gone
                    pass
        self.refs = []
