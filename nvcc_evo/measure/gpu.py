"""The pycuda backend: real kernel time and energy on the GPU, correctness first.

Measurements run in a worker process (measure/gpu_worker.py), one request at
a time. A candidate that kills the CUDA context or hangs is recorded with its
status and the worker is replaced. The baseline's outputs are the reference;
every candidate is compared with them within the bench spec's tolerances
(NaN never passes), on outputs poisoned before the launch.
"""
from __future__ import annotations

import functools
import multiprocessing
import threading
import time
from dataclasses import dataclass, field, replace
from typing import Callable

from nvcc_evo.acf import model
from nvcc_evo.acf.bench.spec import BenchPlan, ExprError, ScalarPlan, plan_bench
from nvcc_evo.cubin.compile import CompileResult
from nvcc_evo.errors import EnvironmentProblem
from nvcc_evo.measure import Confirmation, Measurement, failed, static
from nvcc_evo.measure.check import as_float, outputs_match
from nvcc_evo.measure.gpu_worker import Answer, CopyRate, Incumbent, NoGpu, RunRequest, host_array
from nvcc_evo.measure.stats import Summary, Verdict, faster, summarize
from nvcc_evo.status import Status

OBJECTIVES = ("runtime", "energy") + static.OBJECTIVES
RACE_MARGIN = 0.02      # slower than the incumbent by more than this (or its spread) ends a race
CONFIRM_ROUNDS = 10     # the confirmation's A B pairs
CONFIRM_SECONDS = 0.2   # the timing window of each of their runs
REQUEST_SECONDS = 0.05  # a request's own cost beside its launches (the pipe, a module load, the check)


class TurnLock:
    """A reentrant lock handed over in the order it was asked for: a thread
    that releases it and asks again at once (a confirmation's next round)
    waits behind the threads already waiting (another search's candidate)."""

    def __init__(self) -> None:
        self._turns = threading.Condition()
        self._owner: int | None = None
        self._depth = self._next = self._serving = 0
        self._left: set[int] = set()        # turns whose threads stopped waiting (an exception: Ctrl-C)

    def __enter__(self) -> None:
        me = threading.get_ident()
        with self._turns:
            if self._owner == me:
                self._depth += 1
                return
            ticket, self._next = self._next, self._next + 1
            try:
                self._turns.wait_for(lambda: self._serving == ticket and self._owner is None)
            except BaseException:
                self._left.add(ticket)      # skipped, or the threads behind it would wait for ever
                self._next_turn()
                raise
            self._owner, self._depth = me, 1

    def __exit__(self, *_) -> None:
        with self._turns:
            self._depth -= 1
            if self._depth == 0:
                self._owner, self._serving = None, self._serving + 1
                self._next_turn()

    def _next_turn(self) -> None:
        while self._serving in self._left:
            self._left.discard(self._serving)
            self._serving += 1
        self._turns.notify_all()


class WorkerPool:
    """One measuring process, replaced whenever a candidate breaks it. One
    request at a time (`lock`: several searches at once share a GPU, never
    time on it at once, and take turns)."""

    def __init__(self, target: Callable | None = None, timeout: float = 120.0, device: int = 0):
        from nvcc_evo.measure.gpu_worker import worker_main
        self.target, self.timeout, self.device = target or worker_main, timeout, device
        self.context = multiprocessing.get_context("spawn")
        self.replaced = 0
        self.lock = TurnLock()
        self.hello = self._start()

    def _start(self) -> dict:
        """The new measuring process's Hello, as the dict a backend's `hello` holds."""
        self.connection, child = self.context.Pipe()
        self.process = self.context.Process(target=self.target, args=(child, self.device), daemon=True)
        self.process.start()
        child.close()
        if not self.connection.poll(self.timeout):
            self._stop()
            raise EnvironmentProblem("the GPU worker did not start")
        hello = self.connection.recv()
        if isinstance(hello, NoGpu):
            self._stop()
            raise EnvironmentProblem(f"no usable GPU: {hello.detail}")
        return hello.as_dict()

    def _stop(self) -> None:
        if self.process.is_alive():
            self.process.kill()
        self.process.join(5)

    def _replace(self) -> None:
        self._stop()
        self.replaced += 1
        self.hello = self._start()

    def request(self, message: RunRequest | CopyRate, timeout: float | None = None) -> Answer:
        with self.lock:
            return self._request(message, timeout)

    def _request(self, message: RunRequest | CopyRate, timeout: float | None) -> Answer:
        try:
            self.connection.send(message)
            if not self.connection.poll(timeout or self.timeout):
                # the watchdog: a kernel that never ends (a deadlock) holds its process in the driver; killed,
                # its CUDA context goes with it, and a fresh process measures the next candidate
                self._replace()
                return Answer(Status.TIMEOUT, f"no answer within {timeout or self.timeout:g} s (a kernel that never "
                                         f"ends?): its measuring process was killed and a fresh one started")
            answer = self.connection.recv()
        except (EOFError, BrokenPipeError, ConnectionResetError, OSError):
            self.process.join(5)             # reap it, so that its exit code is known
            code = self.process.exitcode
            self._replace()
            return Answer(Status.CRASH, f"the measuring process died (exit code {code})")
        if not self.process.is_alive() or answer.status == Status.CRASH:
            self.process.join(2)
            self._replace()
        return answer

    def close(self) -> None:
        try:
            self.connection.send(None)
        except OSError:
            pass
        self._stop()


class WorkerPools:
    """One measuring process per CUDA device for the whole retune (started on
    first use; `retune.device` is lane 0's, `retune.gpus` names the others),
    shared by the searches that run at once; closed at the retune's end."""

    def __init__(self) -> None:
        self.pools: dict[int, WorkerPool] = {}
        self.lock = threading.Lock()

    def get(self, device: int = 0) -> WorkerPool:
        with self.lock:
            if device not in self.pools:
                try:
                    import pycuda  # noqa: F401
                except ImportError:
                    raise EnvironmentProblem("the pycuda backend needs PyCUDA (pip install 'nvcc-evo[gpu]') and a GPU")
                self.pools[device] = WorkerPool(device=device)
            return self.pools[device]

    def close(self) -> None:
        with self.lock:
            while self.pools:
                self.pools.popitem()[1].close()


POOLS = WorkerPools()       # this process's (a retune's, or a cluster's measuring actor's)


def reference_outputs(reference: Callable, plan: BenchPlan, seed: int = 0) -> dict:
    """A numpy reference called with the plan's inputs (as float64), scalars,
    sizes and defines, by name."""
    inputs: dict[str, object] = dict(plan.sizes)
    inputs.update({a.name: as_float(host_array(a, seed), plan, a.name) for a in plan.arrays if a.init != "output"})
    inputs.update({s.name: s.value for s in plan.args if isinstance(s, ScalarPlan)})
    return reference(**inputs)


@dataclass
class GpuBench:
    """Measures candidates of one unit with its bench spec."""

    bench: model.Bench
    pool: WorkerPool
    arch: str
    defines_for: Callable                 # genome -> {NAME: value}
    energy: bool = True
    reference: dict | None = None
    baseline_run: tuple | None = None      # (cubin, plan, median us) of the baseline, for drift checks
    expected_fn: Callable | None = None    # the bench's numpy reference, if it names one
    expected: dict | None = None
    min_seconds: float = 0.3                # timing window per candidate
    timeout: float | None = None            # seconds a candidate's run may take (--timeout; None: the pool's)
    incumbent: Incumbent | None = None      # what a race is run against
    settle: bool = False                    # timing may stop once the median is known well enough (stats.settled)
    sent: tuple = (-1, frozenset())          # (the measuring process, by pool.replaced; references it holds)
    first_costs: tuple = ()                 # (the baseline's compile seconds, its kernel's median seconds)
    computing: threading.Thread | None = field(default=None, repr=False)   # the reference, started early

    def prefetch(self, defines: dict) -> None:
        """Start the numpy reference for the bench at `defines` (the baseline's)
        in a thread: it is ready, or nearer, once the baseline is built
        (seconds of numpy on a large bench, which the unit's time would
        otherwise wait for). A bench those defines cannot plan starts nothing:
        the baseline's measurement says why."""
        if self.expected_fn is None or self.expected is not None or self.computing is not None:
            return
        try:
            plan = plan_bench(self.bench, defines)
        except ExprError:
            return
        self.computing = threading.Thread(target=self._compute, args=(plan,), daemon=True)
        self.computing.start()

    def _compute(self, plan: BenchPlan) -> None:
        try:
            self.expected_outputs(plan)
        except Exception:               # said where the reference is needed: computed again there
            pass

    def expected_outputs(self, plan: BenchPlan) -> dict:
        """The numpy reference's outputs for the plan's inputs (seed 0), computed once."""
        if self.computing is not None and self.computing is not threading.current_thread():
            self.computing.join()
        if self.expected is None:
            assert self.expected_fn is not None        # (asked only of a bench that names a reference)
            self.expected = reference_outputs(self.expected_fn, plan)
        return self.expected

    def plan(self, genome) -> BenchPlan:
        return plan_bench(self.bench, self.defines_for(genome))

    def measure(self, genome, flags, result: CompileResult | None) -> Measurement:
        assert result is not None              # (a backend that compiles: each candidate comes built)
        compiled = static.measure(result, self.arch)
        if not result.ok:
            return compiled
        try:
            plan = self.plan(genome)
        except ExprError as error:
            return failed(Status.BAD_BENCH, f"bench spec with this candidate's defines: {error}")
        first = self.reference is None         # the first measurement is the baseline's
        sent = time.perf_counter()
        if self.expected_fn is not None:       # computed before the GPU is held: seconds on a large bench,
            self.expected_outputs(plan)        # in which the other searches at once could measure nothing
        with self.pool.lock:                   # the references it holds are this process's (see _comparison)
            answer = self.pool.request(RunRequest(
                result.cubin, plan, time=True, min_seconds=self.min_seconds, race=self.incumbent, settle=self.settle,
                energy=bool(self.energy and self.pool.hello.get("nvml")), outputs=first,
                **self._comparison(plan, first)), self.timeout)
        costs = dict(answer.costs)
        costs["other"] = time.perf_counter() - sent - sum(costs.values())    # the pipe, pickling, a restart
        measurement = self._judge(answer, plan, result.cubin, compiled, first)
        if first and measurement.ok:
            self.first_costs = (result.seconds, measurement.get("runtime") / 1e6)
        return replace(measurement, costs=tuple(costs.items()))

    def _comparison(self, plan: BenchPlan, first: bool) -> dict:
        """What the worker compares the outputs with (RunRequest's fields, by name):
        the numpy reference's outputs, else the baseline's (this run's, when it
        is the baseline); sent to it once per measuring process."""
        if self.pool.replaced != self.sent[0]:
            self.sent = (self.pool.replaced, set())          # a new measuring process holds nothing yet
        mine = f"{id(self)}:"                  # this bench's references, whatever other benches left there
        given: dict | None
        if self.expected_fn is not None:
            key, given = mine + "expected", self.expected_outputs(plan)
        elif first:
            self.sent[1].add(mine + "baseline")
            return {"keep": mine + "baseline"}
        else:
            key, given = mine + "baseline", self.reference
        asked: dict[str, object] = {"compare": key}
        if key not in self.sent[1]:
            asked["reference"] = (key, given)
            self.sent[1].add(key)
        return asked

    def _judge(self, answer: Answer, plan: BenchPlan, cubin: bytes, compiled: Measurement,
               first: bool) -> Measurement:
        """The worker's answer as a Measurement: the outputs' check, times summarised."""
        if answer.status != Status.OK:
            return failed(answer.status, answer.detail, answer.refusal)
        times = _timed(answer)
        wrong = answer.wrong
        if wrong is not None:
            return failed(Status.WRONG_ANSWER, ("the baseline disagrees with the numpy reference: " if first
                                           else "against the numpy reference: " if self.expected_fn else "")
                          + str(wrong), wrong=wrong.kind)
        if first:
            self.reference, self.baseline_run = answer.outputs, (cubin, plan, times.median)
        metrics = (("runtime", times.median),) + tuple((k, v) for k, v in compiled.metrics if k != "runtime")
        if answer.energy_mj is not None and answer.power_w is not None:      # (measured together)
            metrics += (("energy", answer.energy_mj), ("power", answer.power_w))
        raced = self.incumbent if answer.stopped == "raced" else None         # (a race has its incumbent)
        detail = f"raced: stopped after {times.count} of {answer.planned} timed launches, clearly slower " \
                 f"than the incumbent ({raced.median:.4g} us)" if raced is not None else ""
        return Measurement(Status.OK, metrics, (("runtime", times.spread),), detail, raced=raced is not None)

    def reserve(self) -> float:
        """Seconds the steps after the search are expected to take, from the
        baseline's costs, with a margin of a fifth: the confirmation's two
        builds and the ship check's, its timed pairs (each run a timing window,
        a few launches past it, and the request's own cost) and the
        fresh-input pair. Kept back from a time budget (0 before the baseline)."""
        if not self.first_costs:
            return 0.0
        build, kernel = self.first_costs
        run = CONFIRM_SECONDS + 5 * kernel + REQUEST_SECONDS
        return 1.2 * (3 * build + 2 * CONFIRM_ROUNDS * run + 2 * (kernel + REQUEST_SECONDS))

    def race_against(self, median: float, spread: float) -> None:
        """Later candidates' timing stops once they are clearly slower than
        this (the best feasible runtime so far, and its spread)."""
        self.incumbent = Incumbent(median, max(RACE_MARGIN, spread))

    def drift(self) -> float | None:
        """The baseline timed again: its relative change since the search began."""
        if self.baseline_run is None:
            return None
        cubin, plan, first = self.baseline_run
        answer = self.pool.request(RunRequest(cubin, plan, time=True, min_seconds=0.1))
        return _timed(answer).median / first - 1 if answer.status == Status.OK else None


    def confirm(self, baseline, chosen, build: Callable) -> Confirmation:
        """The confirmation step (see verify) on the two genomes, each built
        again (`build`: genome -> CompileResult), as the Backend's `confirm`."""
        builds = {genome: build(genome) for genome in (baseline, chosen)}
        failed_builds = [f"{side} {builds[g].status}" for side, g in (("baseline", baseline), ("chosen", chosen))
                         if not builds[g].ok]
        if failed_builds:
            return Confirmation(None, f"recompiling for the verification failed ({', '.join(failed_builds)})")
        stats, problem = verify(self.pool, (builds[baseline].cubin, self.plan(baseline)),
                                (builds[chosen].cubin, self.plan(chosen)))
        return Confirmation(stats, f"wrong on fresh inputs: {problem}" if problem else "")


def _timed(answer: Answer) -> Summary:
    """The times of an ok answer to a timed RunRequest, summarised."""
    assert answer.times_us is not None
    return summarize(answer.times_us)


def verify(pool: WorkerPool, baseline: tuple[bytes, BenchPlan], chosen: tuple[bytes, BenchPlan],
           rounds: int = CONFIRM_ROUNDS) -> tuple[Verdict, str]:
    """Re-measure the winner against the baseline, interleaved A B A B, and
    check the winner once more on fresh random inputs. Each A B pair holds
    the GPU (nothing else runs between its two timings); between pairs the
    other searches at once take their turn, so a confirmation does not
    stop their searches for its whole length."""
    medians: dict[str, list[float]] = {"a": [], "b": []}
    for _ in range(rounds):
        with pool.lock:
            for side, (cubin, plan) in (("a", baseline), ("b", chosen)):
                answer = pool.request(RunRequest(cubin, plan, time=True, min_seconds=CONFIRM_SECONDS))
                if answer.status != Status.OK:
                    raise EnvironmentProblem(f"verification run failed: {answer.detail or answer.status}")
                medians[side].append(_timed(answer).median)
    with pool.lock:
        fresh = [pool.request(RunRequest(cubin, plan, outputs=True, seed=1000)) for cubin, plan in (baseline, chosen)]
    problem = "" if all(f.status == Status.OK for f in fresh) else "fresh-input run failed"
    if not problem:
        outputs = [f.outputs for f in fresh]
        assert outputs[0] is not None and outputs[1] is not None     # (ok answers to RunRequest(outputs=True))
        problem = str(outputs_match(outputs[1], outputs[0], chosen[1]) or "")
    return faster(medians["a"], medians["b"]), problem


def gpu_names() -> list[str]:
    """The model of each visible CUDA device, by device number ([] without
    PyCUDA or a device; asked in a child, so this process never creates a
    context; once a process: the backend's choice, its devices and the GPU
    an entry's staleness is judged for all ask)."""
    return list(_gpu_names())


@functools.lru_cache(maxsize=1)
def _gpu_names() -> tuple[str, ...]:
    try:
        import pycuda  # noqa: F401
    except ImportError:
        return ()
    import subprocess
    import sys
    probe = "import pycuda.driver as d; d.init(); print('\\n'.join(d.Device(i).name() for i in range(d.Device.count())))"
    try:
        out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return ()
    return tuple(line.strip() for line in out.stdout.splitlines() if line.strip()) if out.returncode == 0 else ()


def gpu_available() -> bool:
    """PyCUDA importable and a CUDA device present (checked in a child, so
    this process never creates a context)."""
    return bool(gpu_names())
