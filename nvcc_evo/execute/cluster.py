"""The Ray backend of a retune (`--cluster ray://HEAD:PORT`, `auto`, `local`,
`local:N`; the setting `retune.cluster`): compiles as tasks on the
cluster's CPUs, measurements on its GPUs (one actor per GPU for the whole
retune, holding its measuring process and a Backend per search: several
searches, after or beside one another, share it). The static, replay and command backends measure
here, in the driver: a static measurement reads the ptxas report the compile task
sent back (0.2 ms), where a Ray task's round trip took 0.3-0.7 s per
candidate on a 2-core machine (benchmarks/parallel.py), and a bench command
builds in this project.

Ray is an optional extra (`nvcc-evo[cluster]`), imported only here and only
when a cluster is named. What travels is the compile job and then the
cubin: a compile task returns its CompileResult (the cubin's bytes), which
the driver hashes (the SASS dedupe) and hands to a measuring lane
(execute.lanes). With `ray://`, the CPU nodes compile from the same paths as
this machine (the project on a shared file system) and need nvcc-evo and the
toolkit installed; the GPU nodes need only nvcc-evo and PyCUDA.

A worker or node that dies: Ray retries its task once (`RETRIES`); then the
compile is a result with status `lost`, and a measuring actor that is gone
is a lost lane, its candidate measured on another lane or recorded `lost`.
Never a crash of the retune.
"""
from __future__ import annotations

import itertools
import os
import warnings
from dataclasses import replace
from typing import Any, Callable

from nvcc_evo import backends
from nvcc_evo.cubin.compile import (CompileJob, CompileResult, compile_candidate, front_end,
                                    ptxas_only)
from nvcc_evo.driver.specs import RayPlace
from nvcc_evo.errors import EnvironmentProblem
from nvcc_evo.engine.space import Genome
from nvcc_evo.execute import measurers
from nvcc_evo.execute.lanes import LOST, Lane, LaneLost, LaneSet
from nvcc_evo.execute.measurers import Wanted, backend_for
from nvcc_evo.measure import Confirmation, Measurement
from nvcc_evo.measure.backend import Backend, Composed, composed
from nvcc_evo.measure.pycuda.devices import gpu_names
from nvcc_evo.measure.pycuda.pool import POOLS

RETRIES = 1          # Ray's own retries of a task whose worker died, before it counts as lost
_SEARCHES = itertools.count(1)   # the searches measuring on the GPU actors, one key each


def open_cluster(spec: RayPlace | None, dry_run: bool) -> "Cluster | None":
    """The Ray cluster `retune.cluster` names, connected (None: this machine; a dry run connects to
    none)."""
    return connect(spec) if spec and not dry_run else None


def connect(spec: RayPlace) -> "Cluster":
    address, workers = spec.address, spec.workers
    try:
        import ray
    except ImportError:
        raise EnvironmentProblem(f"--cluster {spec.text} needs Ray, which is not installed here: "
                                 "pip install 'nvcc-evo[cluster]'") from None
    # ray.init's
    quiet: dict[str, Any] = dict(log_to_driver=False, logging_level="ERROR",
                                 configure_logging=False)
    try:
        with warnings.catch_warnings():      # Ray Client warns of a timeout, then raises it: said
                                             # once, below
            warnings.simplefilter("ignore")
            if address is None:  # a Ray of its own, even where `ray start` runs one on this machine
                ray.init(address="local", num_cpus=workers or os.cpu_count() or 1,
                         num_gpus=_local_gpus(), include_dashboard=False, **quiet)
            else:
                ray.init(address=address, **quiet)
    except Exception as error:  # Ray's own: ConnectionError, ValueError, RuntimeError, grpc's ...
        raise EnvironmentProblem(f"--cluster {spec.text}: {_connect_problem(error)}") from None
    return Cluster(ray, spec.text)


def _connect_problem(error: Exception) -> str:
    """Why Ray could not start or reach the cluster, in a line."""
    said = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    if "ray[client]" in said:
        return "Ray Client (ray://) is not installed here: pip install 'nvcc-evo[cluster]'"
    return f"could not connect ({type(error).__name__}: {said})"


def _local_gpus() -> int:
    return len(gpu_names())


# ---------------------------------------------------------------- what runs on the workers
def compile_remote(job: CompileJob) -> CompileResult:
    """A candidate compiled in full on a worker."""
    return compile_candidate(job)


def reuse_remote(job: CompileJob, first: list) -> CompileResult:
    """A candidate built from the PTX of the first candidate of its front end
    (`first`: that compile's ObjectRef, in a list so that Ray does not wait
    for it: a lost first compile means a full compile here, not a second
    loss); only ptxas runs, as cubin.compile.PtxCache does on one machine."""
    import ray
    try:
        made = ray.get(first[0])
    except ray.exceptions.RayError:
        made = None
    if made is not None and made.ok and made.ptx:
        result = ptxas_only(job, made.ptx, made.module_id)
        if result.status != "no-ptxas-step":
            return result
    return compile_candidate(job)


class MeasuringActor:
    """One GPU of the cluster for the whole retune: its measuring process
    (measure.pycuda.pool.POOLS: Ray gives the actor its own GPU) and a Backend per search
    measuring there, by key. Several searches at once share the GPU; an actor
    runs one call at a time, so no two candidates are ever timed together."""

    def __init__(self) -> None:
        self.measurers: dict = {}

    def hello(self) -> dict:
        return dict(POOLS.get(0).hello)

    def add(self, key: str, factory: Callable[[], Backend]) -> tuple:
        """A search's Backend, made here; what the driver needs of it."""
        m = self.measurers[key] = factory()
        return (m.objectives, m.device, m.describe, m.hello, m.primary, m.maximize, m.build,
                m.race is not None)

    def drop(self, key: str) -> None:
        self.measurers.pop(key, None)

    def measure(self, key: str, genome: Genome, flags: tuple[str, ...],
                result: CompileResult | None) -> Measurement:
        return self.measurers[key].measure(genome, flags, result)

    def race(self, key: str, median: float, spread: float) -> None:
        self.measurers[key].race(median, spread)

    def drift(self, key: str) -> float | None:
        return self.measurers[key].drift()

    def reserve(self, key: str) -> float:
        return self.measurers[key].reserve()

    def confirm(self, key: str, baseline: Genome, chosen: Genome,
                builds: dict[Genome, CompileResult]) -> Confirmation:
        """The confirmation on this GPU, of the two builds the driver made."""
        return self.measurers[key].confirm(baseline, chosen, builds.__getitem__)


# ---------------------------------------------------------------- the driver's side
class Cluster:
    def __init__(self, ray: Any, spec: str) -> None:        # (ray: the module)
        self.ray, self.spec = ray, spec
        self.compile_task = ray.remote(num_cpus=1, max_retries=RETRIES)(compile_remote)
        self.reuse_task = ray.remote(num_cpus=1, max_retries=RETRIES)(reuse_remote)
        self.actors: list = []
        self._gpu_actors: list | None = None

    def resources(self) -> dict:
        return self.ray.cluster_resources()

    @property
    def workers(self) -> int:
        return max(1, int(self.resources().get("CPU", 1)))

    @property
    def gpus(self) -> int:
        return int(self.resources().get("GPU", 0))

    def backend(self, backend: str) -> str:
        """`auto`: the GPU backend where the cluster has GPUs, else the one that needs none."""
        return backend if backend != backends.AUTO else backends.auto_choice(gpu=bool(self.gpus))

    def gpu_actors(self) -> list:
        """(actor, its GPU's hello) for each GPU of the cluster, made once for
        the whole retune (the searches run after or beside one another share
        them: an actor holds its GPU until the retune ends)."""
        if self._gpu_actors is None:
            actor = self.ray.remote(num_cpus=0, num_gpus=1, max_restarts=0)(MeasuringActor)
            made = [actor.remote() for _ in range(self.gpus)]
            self.actors += made
            try:
                self._gpu_actors = [(handle, self._get(handle.hello.remote())) for handle in made]
            except LaneLost as lost:
                raise EnvironmentProblem(f"the cluster {self.spec}: a GPU's measuring actor did "
                                         f"not start ({lost})") from None
        return self._gpu_actors

    def gpu_arch(self) -> str:
        """The SASS architecture of the cluster's first GPU (the default target)."""
        if not self.gpus:
            raise EnvironmentProblem(f"the cluster {self.spec} has no GPU for the pycuda backend")
        return self.gpu_actors()[0][1]["arch"]

    def compiler(self, reuse: bool) -> "RayCompiler":
        return RayCompiler(self, reuse)

    def lanes(self, backend: str, wanted: Wanted) -> LaneSet:
        """A search's lanes (`wanted`: what its backend's factory may use,
        execute.measurers.Wanted)."""
        task = wanted.task
        if not backends.row(backend).needs_gpu:    # static, replay, command: measured here (the
                                                   # module's docstring)
            made = measurers.backend_for(backend, replace(wanted, device=0))
            return LaneSet([Lane(0, composed(made, describe=f"{made.describe}; compiles on "
                                                               f"{self.workers} Ray worker(s)"),
                                 "this machine")])
        if not self.gpus:
            raise EnvironmentProblem(f"the cluster {self.spec} has no GPU for the {backend} "
                                     "backend")
        everyone = self.gpu_actors()
        try:
            mine = [everyone[i] for i in gpus_for(task.arch, [hello for _, hello in everyone])]
        except EnvironmentProblem as missing:
            raise EnvironmentProblem(f"{task}: the cluster {self.spec} {missing}") from None
        key = f"{task} #{next(_SEARCHES)}"
        factory = _gpu_factory(backend, replace(wanted, replay=None, flags_for=None, device=0))
        lanes = []
        for i, (handle, hello) in enumerate(mine):
            described = self._get(handle.add.remote(key, factory))
            measurer = _actor_measurer(self, handle, key, *described)
            lanes.append(Lane(i, measurer, f"ray GPU {i} ({hello.get('name')})"))
        return LaneSet(lanes, closing=lambda: [handle.drop.remote(key) for handle, _ in mine])

    def _get(self, ref: Any) -> Any:
        """A task's or actor call's value; a dead worker, actor or node is LaneLost."""
        try:
            return self.ray.get(ref)
        except self.ray.exceptions.RayTaskError:
            raise
        except self.ray.exceptions.RayError as error:
            said = str(error).splitlines()[0] if str(error) else ""
            raise LaneLost(f"{type(error).__name__}: {said}") from None

    def close(self) -> None:
        for handle in self.actors:
            self.ray.kill(handle)
        self.actors, self._gpu_actors = [], None
        self.ray.shutdown()


def gpus_for(arch: str, hellos: list[dict]) -> list[int]:
    """Which of the cluster's GPUs (their hellos) a search for `arch` measures
    on: those of that architecture, of the first one's model only (GPUs of
    different models are never mixed in one comparison)."""
    matching = [i for i, hello in enumerate(hellos) if hello.get("arch") == arch]
    if not matching:
        have = ", ".join(sorted({f"{h.get('name')} ({h.get('arch')})" for h in hellos})) or "none"
        raise EnvironmentProblem(f"has no GPU of {arch} (its GPUs: {have})")
    model = hellos[matching[0]].get("name")
    return [i for i in matching if hellos[i].get("name") == model]


def _gpu_factory(backend: str, wanted: Wanted) -> Callable[[], Backend]:
    """What an actor calls to make its GPU's Backend (device 0: Ray gives each actor its own
    GPU)."""
    def make() -> Backend:
        return backend_for(backend, wanted)
    return make


def _actor_measurer(cluster: Cluster, handle: Any, key: str, objectives: tuple[str, ...],
                    device: str, describe: str, hello: dict | None, primary: tuple[str, ...],
                    maximize: tuple[str, ...], build: str, races: bool) -> Composed:
    """The driver's Backend of one search on one GPU actor (`handle`; its calls carry the
    search's key)."""
    get = cluster._get

    def measure(genome: Genome, flags: tuple[str, ...],
                result: CompileResult | None) -> Measurement:
        return get(handle.measure.remote(key, genome, flags, result))

    # built here (the driver's toolkit), confirmed on the actor's GPU
    def confirm(baseline: Genome, chosen: Genome,
                build: Callable[[Genome], CompileResult]) -> Confirmation:
        return get(handle.confirm.remote(key, baseline, chosen,
                                         {g: build(g) for g in (baseline, chosen)}))

    def race(median: float, spread: float) -> None:
        handle.race.remote(key, median, spread)

    return Composed(measure, objectives, device=device, describe=f"{describe} on the cluster",
                    hello=hello, confirm=confirm if hello is not None else None,
                    drift=lambda: get(handle.drift.remote(key)), primary=primary,
                    maximize=maximize, build=build, race=race if races else None,
                    fresh_baseline=True, reserve=lambda: get(handle.reserve.remote(key)))


class RayCompiler:
    """Compiler's interface (submit, result, close) over compile tasks on the
    cluster's CPUs. With `reuse` (the fast protocol), the first candidate of
    each front end compiles in full and the others of that front end run only
    ptxas on its PTX, whichever worker they land on (`reuse_remote`)."""

    def __init__(self, cluster: Cluster, reuse: bool):
        self.cluster, self.reuse = cluster, reuse
        self.refs: list = []                # Ray's ObjectRefs of the compiles under way
        self.fronts: dict = {}              # front end -> the ObjectRef of its first, full compile

    def submit(self, jobs: list) -> list:
        refs: list = []                         # Ray's ObjectRefs
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

    def result(self, ref: Any) -> CompileResult:
        try:
            return self.cluster._get(ref)
        except LaneLost as lost:
            return CompileResult(LOST, 0.0, f"the compile's worker was lost ({lost}), after "
                                            f"{RETRIES} retry")
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
