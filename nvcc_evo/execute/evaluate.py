"""From genomes to evaluations: compile, deduplicate, measure, store.

The Evaluator is the `evaluate` the search engine calls: the machinery that
produces what a search has measured (execute.measured.Measured, the record
it writes). Each candidate is compiled (in parallel: `Compiling`), its SASS
hashed, and a binary already measured gets that measurement again instead
of a new one; every result is appended to the results store as soon as it
exists. Failures are results with infinite objectives and their stderr kept.
"""
from __future__ import annotations

import math
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass, replace
from typing import Any, Callable, Iterable, Protocol

from nvcc_evo.cubin.compile import CompileJob, CompileResult, Compiler, PtxCache, compile_each
from nvcc_evo.cubin.sass import sass_hash
from nvcc_evo.measure import Measurement, failed
from nvcc_evo.measure.backend import Race
from nvcc_evo.engine.evolve import Evaluation
from nvcc_evo.engine.space import Genome
from nvcc_evo.execute.goal import Goal
from nvcc_evo.execute.measured import Measured
from nvcc_evo.execute.store import Store, StoredResult
from nvcc_evo.status import Status
from nvcc_evo.system.clock import NONE, Deadline


class Stopped(Exception):
    """The retune is being interrupted (several searches at once: the main
    thread had the Ctrl-C): nothing more is recorded, a killed compile is
    not a failed candidate."""


NOT_SHIPPED = Status.NOT_SHIPPED     # the build would drop one of the candidate's knobs

Measure = Callable[[Genome, tuple[str, ...], CompileResult | None], Measurement]
Take = Callable[[Genome, tuple[str, ...], CompileResult | None], Evaluation]


@dataclass(frozen=True)
class Builds:
    """How a genome is built: the build's job without candidate flags, the
    genome's flags, the ptxas it asks for (None: the job's) and why its knobs
    would not all reach the build ("" when they do: such a candidate is a
    failure, not-shipped, never measured, so it can be neither chosen nor
    reported; retune.scope.reach)."""

    job: CompileJob
    flags: Callable[[Genome], tuple[str, ...]]
    program: Callable[[Genome], str | None] = lambda genome: None
    lost: Callable[[Genome], str] = lambda genome: ""

    def jobs(self, genomes: list[Genome], flags: list[tuple[str, ...]]) -> list[CompileJob]:
        return [replace(self.job, flags=f, ptxas=self.program(g) or self.job.ptxas)
                for g, f in zip(genomes, flags)]


@dataclass(frozen=True)
class Started:
    """A batch whose compiles are under way."""

    genomes: list[Genome]
    flags: list[tuple[str, ...]]
    futures: list


class Compiles(Protocol):
    """A compile pool as start/finish use it: cubin.compile.Compiler, or
    the cluster's (execute.cluster.RayCompiler)."""

    def submit(self, jobs: list[CompileJob]) -> list: ...

    def result(self, future: Any) -> CompileResult: ...       # (a Future, a Ray ObjectRef)

    def close(self, cancel: bool = False) -> None: ...


class Lanes(Protocol):
    """Several measuring lanes (execute.lanes.LaneSet) as the Evaluator uses
    them: the Evaluator's `measure` is theirs (a candidate on whichever lane
    is free); `submit` runs one candidate's `take` on a thread of theirs, one
    per lane, so that every lane is kept measuring."""

    def submit(self, take: Take, genome: Genome, flags: tuple[str, ...],
               result: CompileResult | None) -> Future[Evaluation]: ...


class Compiling:
    """A search's compiles: a batch at once (`each`), or started and read
    later from a pool that outlives a batch (`start`, `result`); in compile
    slots shared with the searches beside it (`slots`), reusing PTX across
    candidates of one front end (`ptx`)."""

    def __init__(self, workers: int | None = None, ptx: PtxCache | None = None,
                 pool: Compiles | None = None, slots: threading.Semaphore | None = None):
        self.workers, self.ptx, self.slots = workers, ptx, slots
        self._pool = pool                       # made on the first `start` where none is given

    def each(self, jobs: list[CompileJob]) -> Iterable[tuple[int, CompileResult]]:
        """(index, result) of each job as its compile ends."""
        return compile_each(jobs, self.workers, self.ptx, self.slots)

    def start(self, jobs: list[CompileJob]) -> list:
        if self._pool is None:
            self._pool = Compiler(self.workers, self.ptx, self.slots)
        return self._pool.submit(jobs)

    def result(self, future: Any) -> CompileResult:
        assert self._pool is not None       # (start made it)
        return self._pool.result(future)

    def ptxas_only(self) -> int:
        """How many candidates were built from an earlier one's PTX, only ptxas run."""
        return self.ptx.reused if self.ptx is not None else 0

    def close(self) -> None:
        """Compiles still running (a batch started but not measured) are killed."""
        if self._pool is not None:
            self._pool.close(cancel=True)
            self._pool = None


@dataclass
class Racing:
    """The backend's racing (Backend.race): the best feasible, fully timed
    runtime so far is the incumbent later candidates are timed against."""

    race: Race | None
    goal: Goal
    incumbent: float = math.inf

    def offer(self, measurement: Measurement, evaluation: Evaluation) -> None:
        """A better runtime becomes the incumbent (runtime as the one objective
        only: with several, a slower candidate may still be on the front)."""
        if self.race is None or self.goal.minimize != ("runtime",):
            return
        if not evaluation.feasible or measurement.raced:
            return
        runtime = measurement.get("runtime")
        if runtime < self.incumbent:
            self.incumbent = runtime
            self.race(runtime, dict(measurement.spreads).get("runtime", 0.0))


class Evaluator:
    """Compiles, measures and stores candidates into `measured` (see the module's docstring)."""

    def __init__(self, measured: Measured, store: Store, builds: Builds, measure: Measure,
                 compiling: Compiling | None, *, race: Race | None = None,
                 lanes: Lanes | None = None, stopping: threading.Event | None = None):
        self.measured, self.store, self.builds, self.measure = measured, store, builds, measure
        self.compiling = compiling  # None: the backend answers without a compile (replay)
        self.racing = Racing(race, measured.goal)
        self.lanes = lanes                       # several measuring lanes (execute.lanes.LaneSet),
                                                 # if any
        self.stopping = stopping                 # set: the retune is interrupted (Stopped, nothing
                                                 # recorded)
        self.deadline = NONE                     # the search's (system.clock): no candidate
                                                 # measured past it
        self._guard = threading.Lock()           # the lanes' threads record one at a time
        self._kept: dict[Genome, CompileResult | None] = {}     # genomes whose compile is kept
                                                                # (`keep_compile`)

    @property
    def compiles(self) -> bool:
        return self.compiling is not None

    @property
    def ptx(self) -> PtxCache | None:
        return self.compiling.ptx if self.compiling is not None else None

    def measure_until(self, deadline: Deadline) -> None:
        """No candidate is measured past the search's time (`deadline`)."""
        self.deadline = deadline

    def keep_compile(self, genome: Genome) -> None:
        """The genome's compile is kept once it is measured (`kept_compile`): the baseline's."""
        self._kept.setdefault(genome, None)

    def kept_compile(self, genome: Genome) -> CompileResult | None:
        """The kept compile of a genome measured by this evaluator (None: not compiled here), handed
        over."""
        return self._kept.pop(genome, None)

    def offer_incumbent(self, genome: Genome) -> None:
        """A measured genome (read back from the store) offered as the incumbent candidates race
        against."""
        measurement = self.measured[genome]
        self.racing.offer(measurement, self.measured.evaluation(genome, measurement))

    def __call__(self, genomes: list[Genome]) -> list[Evaluation]:
        """Evaluate a batch; each result is stored the moment it is measured,
        so an interruption loses only what is still compiling."""
        if self.lanes is not None:               # measured on the lanes, in order (see finish)
            return self.finish(self.start(genomes), 0, len(genomes))
        flags = [self.builds.flags(g) for g in genomes]
        finished: Iterable[tuple[int, CompileResult | None]]
        if self.compiling is not None:
            finished = self.compiling.each(self.builds.jobs(genomes, flags))
        else:
            finished = ((i, None) for i in range(len(genomes)))
        done = {}
        for index, result in finished:
            if self.out_of_time():
                break              # the search's time is up: the rest of the batch is not measured
            done[index] = self.take(genomes[index], flags[index], result)
        return [done[i] for i in range(len(genomes)) if i in done]

    def out_of_time(self) -> bool:
        """No time left for one more candidate: a candidate is started only where one as long as the
        typical one so far (the median) ends by the deadline, so a slow bench (a program run per
        candidate, 6-15 s for a Triton kernel) does not overrun the search's time, and with it the
        confirmation's."""
        return self.deadline.search_left() <= self.measured.typical_pace()

    def start(self, genomes: list[Genome]) -> Started:
        """Start compiling a batch and return at once, so that it compiles
        while the batch before it is measured (finish measures it)."""
        flags = [self.builds.flags(g) for g in genomes]
        if self.compiling is None:
            return Started(genomes, flags, [None] * len(genomes))
        return Started(genomes, flags, self.compiling.start(self.builds.jobs(genomes, flags)))

    def finish(self, started: Started, begin: int, end: int) -> list[Evaluation]:
        """Measure candidates begin..end-1 of a started batch, in order (the
        racing incumbent, and so the measurements, do not depend on which
        compile ended first); with lanes, on whichever lane is free."""
        if self.lanes is not None:
            return self._finish_on(self.lanes, started, begin, end)
        taken = []
        for i in range(begin, end):
            if self.out_of_time():
                break  # the search's time is up (a slow backend: a bench command per candidate)
            taken.append(self.take(started.genomes[i], started.flags[i], self.compiled(started, i)))
        return taken

    def _finish_on(self, lanes: Lanes, started: Started, begin: int, end: int) -> list[Evaluation]:
        """Candidates begin..end-1 of a started batch measured on the lanes,
        their evaluations in genome order: a binary the same as one in flight
        waits for it and reuses its measurement, as in one lane, so that a
        deterministic backend's records are those of the serial run."""
        futures, waiting, flying = {}, [], {}
        for i in range(begin, end):
            genome, flags = started.genomes[i], started.flags[i]
            result = self.compiled(started, i)
            digest = digest_of(result)
            if digest and digest in flying:             # the same binary is being measured: reuse
                                                        # it after
                waiting.append((i, genome, flags, result))
                continue
            futures[i] = lanes.submit(self.take, genome, flags, result)
            if digest:
                flying[digest] = futures[i]
        done = {i: future.result() for i, future in futures.items()}
        for i, genome, flags, result in waiting:
            done[i] = self.take(genome, flags, result)
        return [done[i] for i in range(begin, end)]

    def refused(self, started: Started) -> list[Evaluation]:
        """The candidates of a started batch whose compile failed, once the whole batch has compiled
        (the same for a given seed, whichever compile ended first): what they teach
        (execute.learned) reaches the batch asked next instead of the one after it. Their
        measurements are kept for the learners (`refuse`)."""
        refused = []
        for index, genome in enumerate(started.genomes):
            result = self.compiled(started, index)
            if result is not None and result.status == Status.COMPILE_ERROR:
                refusal = failed(result.status, result.stderr, overflow=result.overflow)
                self.measured.refuse(genome, refusal)
                refused.append(self.measured.evaluation(genome, refusal))
        return refused

    def compiled(self, started: Started, index: int) -> CompileResult | None:
        return self.compiling.result(started.futures[index]) if self.compiling is not None else None

    def close(self) -> None:
        """Compiles still running (a batch started but not measured) are killed."""
        if self.compiling is not None:
            self.compiling.close()

    def take(self, genome: Genome, flag_list: tuple[str, ...],
             result: CompileResult | None) -> Evaluation:
        """One compiled candidate measured (or its binary's measurement reused), stored, counted
        (from several lanes' threads at once: the bookkeeping under the guard)."""
        self._unless_stopping()
        if genome in self._kept and result is not None:
            self._kept[genome] = result
        lost = self.builds.lost(genome)
        measurement, digest = (Measurement(NOT_SHIPPED, detail=lost), "") if lost else \
            self._measure_once(genome, flag_list, result)
        with self._guard:
            self._unless_stopping()      # its compile may have been killed: not a result to keep
            self.store.append(StoredResult(genome, flag_list, measurement, digest,
                                           self.measured.context))
            ptxas_only = self.compiling.ptxas_only() if self.compiling is not None else 0
            evaluation = self.measured.record(genome, measurement, digest, ptxas_only)
            self.racing.offer(measurement, evaluation)
            return evaluation

    def _unless_stopping(self) -> None:
        if self.stopping is not None and self.stopping.is_set():
            raise Stopped()

    def _measure_once(self, genome: Genome, flag_list: tuple[str, ...],
                      result: CompileResult | None) -> tuple[Measurement, str]:
        digest = digest_of(result)
        compiled = (("compile", result.seconds),) if result is not None else ()
        with self._guard:
            reused = self.measured.reused(digest, compiled)
        if reused is not None:
            return reused, digest
        started = time.perf_counter()
        measurement = self.measure(genome, flag_list, result)
        with self._guard:
            self.measured.paced(time.perf_counter() - started)
        digest = measurement.sass_hash or digest    # replay's recorded hash (it compiles nothing)
        if not measurement.costs:                   # a backend that does not say where its time
                                                    # went
            measurement = replace(measurement, costs=(("other", time.perf_counter() - started),))
        measurement = replace(measurement, costs=compiled + measurement.costs)
        with self._guard:
            self.measured.remember_binary(digest, measurement)
        return measurement, digest


def digest_of(result: CompileResult | None) -> str:
    """The SASS hash of a compiled binary ("" where it did not compile, or nothing was)."""
    return sass_hash(result.cubin, result.module_id) if result is not None and result.ok else ""
