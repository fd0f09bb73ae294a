"""The pycuda backend's answer for one unit: a candidate's run on the GPU
(its outputs checked against the reference, its kernel timed, racing the
incumbent; energy where asked), the baseline's drift, the confirmation, and
what the steps after the search are expected to take (`reserve`)."""
from __future__ import annotations

import time
from collections.abc import Hashable
from dataclasses import InitVar, dataclass, field, replace
from typing import Callable

from nvcc_evo.acf import model
from nvcc_evo.acf.bench.spec import BenchPlan, ExprError, plan_bench
from nvcc_evo.cubin.compile import CompileResult
from nvcc_evo.measure import Confirmation, Measurement, failed, static
from nvcc_evo.measure.pycuda.confirm import CONFIRM_ROUNDS, CONFIRM_SECONDS, timed, verify
from nvcc_evo.measure.pycuda.pipe import Answer, RunRequest
from nvcc_evo.measure.pycuda.pool import WorkerPool
from nvcc_evo.measure.pycuda.references import References
from nvcc_evo.measure.pycuda.timing import Incumbent
from nvcc_evo.status import Status

OBJECTIVES = ("runtime", "energy") + static.OBJECTIVES
RACE_MARGIN = 0.02      # slower than the incumbent by more than this (or its spread) ends a race
REQUEST_SECONDS = 0.05  # a request's own cost beside its launches (pipe, module load, check)


@dataclass(frozen=True)
class BaselineRun:
    """The baseline's first run: its binary, plan and median (us), for the drift; its compile's
    seconds and its kernel's median seconds, for the reserve."""

    cubin: bytes
    plan: BenchPlan
    median: float
    build_seconds: float
    kernel_seconds: float


@dataclass
class GpuBench:
    """Measures candidates of one unit with its bench spec."""

    bench: model.Bench
    pool: WorkerPool
    arch: str
    defines_for: Callable                 # genome -> {NAME: value}
    energy: bool = True
    reference: InitVar[dict | None] = None          # the baseline's outputs, known before its run
    expected_fn: InitVar[Callable | None] = None    # the bench's numpy reference, if it names one
    min_seconds: float = 0.3                # timing window per candidate
    timeout: float | None = None            # a candidate's run at most, s (None: the pool's)
    settle: bool = False                    # stop once the median is known well (stats.settled)
    incumbent: Incumbent | None = None      # what a race is run against
    baseline_run: BaselineRun | None = None
    references: References = field(init=False, repr=False)

    def __post_init__(self, reference: dict | None, expected_fn: Callable | None) -> None:
        self.references = References(f"{id(self)}:", expected_fn, reference)

    def prefetch(self, defines: dict) -> None:
        """The numpy reference at the baseline's `defines` started in a thread
        (References.prefetch)."""
        self.references.prefetch(self.bench, defines)

    def plan(self, genome: Hashable) -> BenchPlan:
        return plan_bench(self.bench, self.defines_for(genome))

    def measure(self, genome: Hashable, flags: tuple[str, ...],
                result: CompileResult | None) -> Measurement:
        assert result is not None  # (a backend that compiles: each candidate comes built)
        compiled = static.measure(result, self.arch)
        if not result.ok:
            return compiled
        try:
            plan = self.plan(genome)
        except ExprError as error:
            return failed(Status.BAD_BENCH, f"bench spec with this candidate's defines: {error}")
        first = self.references.baseline is None         # the first measurement is the baseline's
        sent = time.perf_counter()
        # computed before the GPU is held: seconds on a large bench, in which the other searches
        # at once measure nothing
        if self.references.expected_fn is not None:
            self.references.expected_outputs(plan)
        with self.pool.lock:                   # the references it holds are this process's
            energy = bool(self.energy and self.pool.hello.get("nvml"))
            request = RunRequest(result.cubin, plan, time=True, min_seconds=self.min_seconds,
                                 race=self.incumbent, settle=self.settle, energy=energy,
                                 outputs=first,
                                 **self.references.comparison(plan, first, self.pool.replaced))
            answer = self.pool.request(request, self.timeout)
        costs = dict(answer.costs)
        costs["other"] = time.perf_counter() - sent - sum(costs.values())   # pipe, pickle, restart
        measurement = self._judge(answer, plan, compiled, first)
        if first and measurement.ok:
            self.references.baseline = answer.outputs
            self.baseline_run = BaselineRun(result.cubin, plan, timed(answer).median,
                                            result.seconds, measurement.get("runtime") / 1e6)
        return replace(measurement, costs=tuple(costs.items()))

    def _judge(self, answer: Answer, plan: BenchPlan, compiled: Measurement,
               first: bool) -> Measurement:
        """The worker's answer as a Measurement: the outputs' check, times summarised."""
        if answer.status != Status.OK:
            return failed(answer.status, answer.detail, answer.refusal)
        times = timed(answer)
        wrong = answer.wrong
        if wrong is not None:
            return failed(Status.WRONG_ANSWER, self._against(first) + str(wrong), wrong=wrong.kind)
        compiled_metrics = tuple((k, v) for k, v in compiled.metrics if k != "runtime")
        metrics = (("runtime", times.median),) + compiled_metrics
        if answer.energy_mj is not None and answer.power_w is not None:      # (measured together)
            metrics += (("energy", answer.energy_mj), ("power", answer.power_w))
        raced = self.incumbent if answer.stopped == "raced" else None   # (a race has its incumbent)
        detail = ""
        if raced is not None:
            detail = (f"raced: stopped after {times.count} of {answer.planned} timed launches, "
                      f"clearly slower than the incumbent ({raced.median:.4g} us)")
        return Measurement(Status.OK, metrics, (("runtime", times.spread),), detail,
                           raced=raced is not None)

    def _against(self, first: bool) -> str:
        """What a wrong answer was compared with, in words ("" for the baseline's outputs)."""
        if self.references.expected_fn is None:
            return ""
        if first:
            return "the baseline disagrees with the numpy reference: "
        return "against the numpy reference: "

    def reserve(self) -> float:
        """Seconds the steps after the search are expected to take, from the
        baseline's costs, with a margin of a fifth: the confirmation's two
        builds and the ship check's, its timed pairs (each run a timing window,
        a few launches past it, and the request's own cost) and the
        fresh-input pair. Kept back from a time budget (0 before the baseline)."""
        if self.baseline_run is None:
            return 0.0
        build, kernel = self.baseline_run.build_seconds, self.baseline_run.kernel_seconds
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
        run = self.baseline_run
        answer = self.pool.request(RunRequest(run.cubin, run.plan, time=True, min_seconds=0.1))
        return timed(answer).median / run.median - 1 if answer.status == Status.OK else None

    def confirm(self, baseline: Hashable, chosen: Hashable,
                build: Callable[[Hashable], CompileResult]) -> Confirmation:
        """The confirmation step (confirm.verify) on the two genomes, each built
        again (`build`: genome -> CompileResult), as the Backend's `confirm`."""
        builds = {genome: build(genome) for genome in (baseline, chosen)}
        sides = (("baseline", baseline), ("chosen", chosen))
        failed_builds = [f"{side} {builds[g].status}" for side, g in sides if not builds[g].ok]
        if failed_builds:
            return Confirmation(None, "recompiling for the verification failed "
                                      f"({', '.join(failed_builds)})")
        stats, problem = verify(self.pool, (builds[baseline].cubin, self.plan(baseline)),
                                (builds[chosen].cubin, self.plan(chosen)))
        return Confirmation(stats, f"wrong on fresh inputs: {problem}" if problem else "")
