"""From genomes to evaluations: compile, deduplicate, measure, store.

The Evaluator is the `evaluate` the search engine calls. Each candidate is
compiled (in parallel), its SASS hashed, and a binary already measured gets
that measurement again instead of a new one; every result is appended to the
results store as soon as it exists. Failures are results with infinite
objectives and their stderr kept.
"""
from __future__ import annotations

import math
import statistics
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass, field, replace
from typing import Callable, Protocol

from nvcc_evo.cubin.compile import CompileJob, CompileResult, Compiler, PtxCache, compile_each
from nvcc_evo.cubin.sass import sass_hash
from nvcc_evo.measure import COST_STAGES, Measurement, failed
from nvcc_evo.measure.backend import Race
from nvcc_evo.engine.evolve import Evaluation
from nvcc_evo.engine.space import Genome
from nvcc_evo.execute.goal import Goal
from nvcc_evo.execute.store import Context, StoredResult, Store
from nvcc_evo.status import Status
from nvcc_evo.system.clock import NONE, Deadline


class Stopped(Exception):
    """The retune is being interrupted (several searches at once: the main
    thread had the Ctrl-C): nothing more is recorded, a killed compile is
    not a failed candidate."""


def first_problem(detail: str, width: int = 160) -> str:
    """The line of a failure's stderr a user reads first: the first that says
    error (or fatal), else the last non-empty one."""
    lines = [line.strip() for line in detail.splitlines() if line.strip()]
    said = next((line for line in lines if "error" in line.lower() or "fatal" in line.lower()),
                lines[-1] if lines else "(no message)")
    return said if len(said) <= width else said[:width - 3] + "..."


@dataclass
class Tally:
    evaluated: int = 0
    reused: int = 0          # same SASS as an earlier candidate: its measurement reused
    resumed: int = 0         # read back from the results store
    failed: int = 0
    failures: dict = field(default_factory=dict)    # status -> [count, first message]
    raced: int = 0           # timing stopped early: clearly slower than the incumbent
    ptxas_only: int = 0      # built from an earlier candidate's PTX: only ptxas ran
    costs: dict = field(default_factory=dict)       # stage -> seconds, summed over this run's candidates
    started: float = field(default_factory=time.monotonic)
    stopped: float | None = None     # when this unit's search and verification ended (`stop`)

    def stop(self) -> None:
        """The unit's own work is done: its pace is over its own time, not
        the whole retune's (a summary printed after every unit's search)."""
        self.stopped = time.monotonic()

    def count_costs(self, measurement: Measurement) -> None:
        for stage, seconds in measurement.costs:
            self.costs[stage] = self.costs.get(stage, 0.0) + seconds

    def costs_text(self) -> str:
        """`1.8 binaries/min; per candidate: compile 1.05 s, load 0.01 s, ...`: the
        mean seconds of each stage over this run's candidates (compiles run in
        parallel, so the stages add up to more than the wall time)."""
        count = max(1, self.evaluated)
        ended = self.stopped if self.stopped is not None else time.monotonic()
        rate = self.evaluated / max(1e-9, ended - self.started) * 60
        shown = ", ".join(f"{stage} {self.costs[stage] / count:.3g} s" for stage in COST_STAGES
                          if self.costs.get(stage, 0.0) > 0)
        return f"{rate:.1f} candidates/min" + (f"; per candidate: {shown}" if shown else "") + \
            (f"; {self.ptxas_only} ptxas only" if self.ptxas_only else "") + \
            (f"; {self.raced} raced out" if self.raced else "")

    def count_failure(self, measurement: Measurement) -> None:
        self.failed += 1
        seen = self.failures.setdefault(measurement.status, [0, first_problem(measurement.detail)])
        seen[0] += 1

    def failures_text(self) -> str:
        """`compile-error 14 (e.g. "ptxas error : ..."); timeout 1 (...)`, or ""."""
        return "; ".join(f'{status} {count} (e.g. "{example}")'
                         for status, (count, example) in sorted(self.failures.items(), key=lambda s: -s[1][0]))


@dataclass(frozen=True)
class Started:
    """A batch whose compiles are under way."""

    genomes: list
    flags: list
    futures: list


NOT_SHIPPED = Status.NOT_SHIPPED     # the build would drop one of the candidate's knobs

Take = Callable[[Genome, tuple[str, ...], CompileResult | None], Evaluation]


class Compiles(Protocol):
    """A compile pool as start/finish use it: cubin.compile.Compiler, or
    the cluster's (execute.cluster.RayCompiler)."""

    def submit(self, jobs: list[CompileJob]) -> list: ...

    def result(self, future) -> CompileResult: ...

    def close(self, cancel: bool = False) -> None: ...


class Lanes(Protocol):
    """Several measuring lanes (execute.lanes.LaneSet) as the Evaluator uses
    them: the Evaluator's `measure` is theirs (a candidate on whichever lane
    is free); `submit` runs one candidate's `take` on a thread of theirs, one
    per lane, so that every lane is kept measuring."""

    def submit(self, take: Take, genome: Genome, flags: tuple[str, ...],
               result: CompileResult | None) -> Future[Evaluation]: ...


@dataclass
class Evaluator:
    job: CompileJob                                   # the build, without candidate flags
    goal: Goal
    context: Context
    store: Store
    flags_for: Callable[[Genome], tuple[str, ...]]
    measure: Callable[[Genome, tuple[str, ...], CompileResult | None], Measurement]
    compiles: bool = True                             # replay answers without compiling
    workers: int | None = None
    baseline: dict = field(default_factory=dict)
    by_hash: dict = field(default_factory=dict)
    measured: dict = field(default_factory=dict)      # genome -> Measurement
    digests: dict = field(default_factory=dict)       # genome -> its binary's SASS hash ("" if none)
    tally: Tally = field(default_factory=Tally)
    race: Race | None = None                          # the backend's racing (Backend.race), if it races
    ptx: PtxCache | None = None                       # PTX reuse across candidates of one front end
    compiler: Compiles | None = None                  # the compile pool of start/finish (made on first use)
    incumbent: float = math.inf                       # the best feasible runtime raced against
    program_for: Callable[[Genome], str | None] = lambda genome: None   # the ptxas it asks for (None: the job's)
    lanes: Lanes | None = None                        # several measuring lanes (execute.lanes.LaneSet), if any
    guard: threading.Lock = field(default_factory=threading.Lock)   # the lanes' threads record one at a time
    # Why a genome's knobs would not all reach the build ("" when they do): such a candidate is a
    # failure (not-shipped), never measured, so it can be neither chosen nor reported (retune.scope.reach).
    not_shipped: Callable[[Genome], str] = lambda genome: ""
    slots: threading.Semaphore | None = None          # compile slots shared with other searches at once
    stopping: threading.Event | None = None           # set: the retune is interrupted (Stopped, nothing recorded)
    deadline: Deadline = NONE                         # the search's (system.clock): no candidate measured past it
    paces: list = field(default_factory=list)         # seconds each candidate measured so far took (not reused)
    refusals: dict = field(default_factory=dict)      # genome -> its failed compile's Measurement, before measured
    keep: set = field(default_factory=set)            # genomes whose compile is kept (`kept`): the baseline's
    kept: dict = field(default_factory=dict)          # genome -> its CompileResult, of the genomes in `keep`

    def resume(self, records: list[StoredResult]) -> list[Evaluation]:
        """Evaluations read back from the store, so no genome is redone."""
        evaluations = []
        for record in records:
            self.measured[record.genome] = record.measurement
            self.digests[record.genome] = record.sass_hash
            if record.sass_hash and record.measurement.ok:
                self.by_hash.setdefault(record.sass_hash, record.measurement)
            evaluations.append(self.evaluation(record.genome, record.measurement))
        self.tally.resumed += len(records)
        return evaluations

    def forget(self, genome: Genome) -> None:
        """A genome read back from the store, to be measured again: its
        measurement, and its binary's, no longer stand in for a new one."""
        self.measured.pop(genome, None)
        self.by_hash.pop(self.digests.pop(genome, ""), None)

    def evaluation(self, genome: Genome, measurement: Measurement) -> Evaluation:
        if not measurement.ok:
            return Evaluation(genome, tuple(math.inf for _ in self.goal.minimize), math.inf, measurement.status)
        metrics = dict(measurement.metrics)
        violation = self.goal.violation(metrics, self.baseline)
        return Evaluation(genome, self.goal.scores(metrics), violation)

    def __call__(self, genomes: list[Genome]) -> list[Evaluation]:
        """Evaluate a batch; each result is stored the moment it is measured,
        so an interruption loses only what is still compiling."""
        if self.lanes is not None:               # measured on the lanes, in order (see finish)
            return self.finish(self.start(genomes), 0, len(genomes))
        flags = [self.flags_for(g) for g in genomes]
        if self.compiles:
            finished = compile_each([replace(self.job, flags=f, ptxas=self.program_for(g) or self.job.ptxas)
                                     for g, f in zip(genomes, flags)], self.workers, self.ptx, self.slots)
        else:
            finished = ((i, None) for i in range(len(genomes)))
        done = {}
        for index, result in finished:
            if self.out_of_time():
                break              # the search's time is up: the rest of the batch is not measured
            done[index] = self.take(genomes[index], flags[index], result)
        return [done[i] for i in range(len(genomes)) if i in done]

    def out_of_time(self) -> bool:
        """No time left for one more candidate: a candidate is started only where one as long as the typical
        one so far (the median) ends by the deadline, so a slow bench (a program run per candidate, 6-15 s
        for a Triton kernel) does not overrun the search's time, and with it the confirmation's."""
        typical = statistics.median(self.paces) if self.paces else 0.0
        return self.deadline.search_left() <= typical

    def start(self, genomes: list[Genome]) -> "Started":
        """Start compiling a batch and return at once, so that it compiles
        while the batch before it is measured (finish measures it)."""
        flags = [self.flags_for(g) for g in genomes]
        if not self.compiles:
            return Started(genomes, flags, [None] * len(genomes))
        if self.compiler is None:
            self.compiler = Compiler(self.workers, self.ptx, self.slots)
        return Started(genomes, flags, self.compiler.submit([replace(self.job, flags=f, ptxas=self.program_for(g) or self.job.ptxas)
                                                             for g, f in zip(genomes, flags)]))

    def finish(self, started: "Started", begin: int, end: int) -> list[Evaluation]:
        """Measure candidates begin..end-1 of a started batch, in order (the
        racing incumbent, and so the measurements, do not depend on which
        compile ended first); with lanes, on whichever lane is free."""
        if self.lanes is not None:
            return self._finish_on(self.lanes, started, begin, end)
        taken = []
        for i in range(begin, end):
            if self.out_of_time():
                break              # the search's time is up (a slow backend: a bench command per candidate)
            taken.append(self.take(started.genomes[i], started.flags[i], self.compiled(started, i)))
        return taken

    def _finish_on(self, lanes: Lanes, started: "Started", begin: int, end: int) -> list[Evaluation]:
        """Candidates begin..end-1 of a started batch measured on the lanes,
        their evaluations in genome order: a binary the same as one in flight
        waits for it and reuses its measurement, as in one lane, so that a
        deterministic backend's records are those of the serial run."""
        futures, waiting, flying = {}, [], {}
        for i in range(begin, end):
            genome, flags = started.genomes[i], started.flags[i]
            result = self.compiled(started, i)
            digest = self.digest(result)
            if digest and digest in flying:             # the same binary is being measured: reuse it after
                waiting.append((i, genome, flags, result))
                continue
            futures[i] = lanes.submit(self.take, genome, flags, result)
            if digest:
                flying[digest] = futures[i]
        done = {i: future.result() for i, future in futures.items()}
        for i, genome, flags, result in waiting:
            done[i] = self.take(genome, flags, result)
        return [done[i] for i in range(begin, end)]

    def refused(self, started: "Started") -> list[Evaluation]:
        """The candidates of a started batch whose compile failed, once the whole batch has compiled (the
        same for a given seed, whichever compile ended first): what they teach (execute.learned) reaches the
        batch asked next instead of the one after it. Their measurements are kept for the learners (`refusals`)."""
        if not self.compiles:
            return []
        refused = []
        for index, genome in enumerate(started.genomes):
            result = self.compiled(started, index)
            if result is not None and result.status == Status.COMPILE_ERROR:
                refusal = failed(result.status, result.stderr, overflow=result.overflow)
                self.refusals[genome] = refusal
                refused.append(self.evaluation(genome, refusal))
        return refused

    def compiled(self, started: "Started", index: int) -> CompileResult | None:
        if not self.compiles:
            return None
        assert self.compiler is not None       # (start made it)
        return self.compiler.result(started.futures[index])

    @staticmethod
    def digest(result: CompileResult | None) -> str:
        return sass_hash(result.cubin, result.module_id) if result is not None and result.ok else ""

    def close(self) -> None:
        """Compiles still running (a batch started but not measured) are killed."""
        if self.compiler is not None:
            self.compiler.close(cancel=True)
            self.compiler = None

    def take(self, genome: Genome, flag_list: tuple[str, ...], result: CompileResult | None) -> Evaluation:
        """One compiled candidate measured (or its binary's measurement reused), stored, counted
        (from several lanes' threads at once: the bookkeeping under `guard`)."""
        if self.stopping is not None and self.stopping.is_set():
            raise Stopped()
        if genome in self.keep and result is not None:
            self.kept[genome] = result
        lost = self.not_shipped(genome)
        measurement, digest = (Measurement(NOT_SHIPPED, detail=lost), "") if lost else \
            self._measure_once(genome, flag_list, result)
        with self.guard:
            return self._record(genome, flag_list, measurement, digest)

    def _record(self, genome, flag_list, measurement: Measurement, digest: str) -> Evaluation:
        if self.stopping is not None and self.stopping.is_set():
            raise Stopped()              # its compile may have been killed: not a result to keep
        self.measured[genome] = measurement
        self.digests[genome] = digest
        self.store.append(StoredResult(genome, flag_list, measurement, digest, self.context))
        self.tally.evaluated += 1
        self.tally.ptxas_only = self.ptx.reused if self.ptx is not None else 0
        self.tally.count_costs(measurement)
        self.tally.raced += measurement.raced and not measurement.reused
        if not measurement.ok:
            self.tally.count_failure(measurement)
        evaluation = self.evaluation(genome, measurement)
        self.offer_incumbent(measurement, evaluation)
        return evaluation

    def offer_incumbent(self, measurement: Measurement, evaluation: Evaluation) -> None:
        """A feasible, fully timed runtime better than the incumbent becomes
        the one later candidates race against (runtime as the one objective
        only: with several, a slower candidate may still be on the front)."""
        if self.race is None or self.goal.minimize != ("runtime",) or not evaluation.feasible or measurement.raced:
            return
        runtime = measurement.get("runtime")
        if runtime < self.incumbent:
            self.incumbent = runtime
            self.race(runtime, dict(measurement.spreads).get("runtime", 0.0))

    def _measure_once(self, genome, flag_list, result) -> tuple[Measurement, str]:
        digest = self.digest(result)
        compiled = (("compile", result.seconds),) if result is not None else ()
        with self.guard:
            if digest and digest in self.by_hash:
                self.tally.reused += 1
                return replace(self.by_hash[digest], reused=True, costs=compiled), digest
        started = time.perf_counter()
        measurement = self.measure(genome, flag_list, result)
        with self.guard:
            self.paces.append(time.perf_counter() - started)
        digest = measurement.sass_hash or digest    # replay's recorded hash (it compiles nothing)
        if not measurement.costs:                   # a backend that does not say where its time went
            measurement = replace(measurement, costs=(("other", time.perf_counter() - started),))
        measurement = replace(measurement, costs=compiled + measurement.costs)
        if digest and measurement.ok:
            with self.guard:
                self.by_hash[digest] = measurement
        return measurement, digest
