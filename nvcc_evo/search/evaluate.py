"""From genomes to evaluations: compile, deduplicate, measure, store.

The Evaluator is the `evaluate` the search engine calls. Each candidate is
compiled (in parallel), its SASS hashed, and a binary already measured gets
that measurement again instead of a new one; every result is appended to the
results store as soon as it exists. Failures are results with infinite
objectives and their stderr kept.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Callable

from nvcc_evo.acf import model
from nvcc_evo.driver.candidate import CompileJob, CompileResult, compile_each, sass_hash
from nvcc_evo.measure import Measurement
from nvcc_evo.search.evolve import Evaluation
from nvcc_evo.search.space import Genome
from nvcc_evo.search.store import Context, Record, Store

STATIC_DEFAULT = ("spills", "registers")


@dataclass(frozen=True)
class Goal:
    """What to minimise, what must hold, and how to pick one point."""

    minimize: tuple[str, ...]
    require: tuple[model.Condition, ...] = ()
    select: str = ""
    select_where: tuple[model.Condition, ...] = ()
    note: str = ""
    maximize: tuple[str, ...] = ()     # of the objectives, those where higher is better (scored negated)

    def __str__(self) -> str:
        named = ", ".join(f"{m} (maximized)" if m in self.maximize else m for m in self.minimize)
        return "minimize " + named + (f" ({self.note})" if self.note else "")

    def scores(self, metrics: dict) -> tuple[float, ...]:
        """The objectives as the search minimises them."""
        return tuple(-metrics.get(m, -math.inf) if m in self.maximize else metrics.get(m, math.inf)
                     for m in self.minimize)

    def better(self, metric: str, after: float, before: float) -> bool:
        return after > before if metric in self.maximize else after < before


def goal_for(tune: model.Tune | None, available: tuple[str, ...], primary: tuple[str, ...] = (),
             maximize: tuple[str, ...] = ()) -> Goal:
    """The unit's tune block, limited to what the backend can measure;
    without one, the backend's primary objectives (a bench command's first
    metric), else registers and spills."""
    wanted = tune.minimize if tune and tune.minimize else ()
    usable = tuple(m for m in wanted if m in available)
    note = ""
    if not usable:
        usable = primary or tuple(m for m in STATIC_DEFAULT if m in available) or available[:1]
        if wanted:
            note = f"{', '.join(wanted)} cannot be measured here; tuning {', '.join(usable)} instead"
    require = tuple(c for c in (tune.require if tune else ()) if c.metric in available)
    select = tune.select if tune and tune.select in usable else usable[0]
    where = tuple(c for c in (tune.select_where if tune else ()) if c.metric in available)
    return Goal(usable, require, select, where, note, tuple(m for m in usable if m in maximize))


def holds(condition: model.Condition, metrics: dict, baseline: dict) -> float:
    """How far `metrics` is from meeting the condition (0: it holds)."""
    value = metrics.get(condition.metric, math.inf)
    bound = condition.bound * baseline.get(condition.metric, math.inf) if condition.relative else condition.bound
    if condition.op in ("<=", "<"):
        gap = value - bound
        return max(0.0, gap) + (1e-9 if condition.op == "<" and gap == 0 else 0.0)
    if condition.op in (">=", ">"):
        gap = bound - value
        return max(0.0, gap) + (1e-9 if condition.op == ">" and gap == 0 else 0.0)
    return abs(value - bound)


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

    def count_failure(self, measurement: Measurement) -> None:
        self.failed += 1
        seen = self.failures.setdefault(measurement.status, [0, first_problem(measurement.detail)])
        seen[0] += 1

    def failures_text(self) -> str:
        """`compile-error 14 (e.g. "ptxas error : ..."); timeout 1 (...)`, or ""."""
        return "; ".join(f'{status} {count} (e.g. "{example}")'
                         for status, (count, example) in sorted(self.failures.items(), key=lambda s: -s[1][0]))


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
    tally: Tally = field(default_factory=Tally)
    program_for: Callable[[Genome], str | None] = lambda genome: None   # the ptxas it asks for (None: nvcc's)

    def resume(self, records: list[Record]) -> list[Evaluation]:
        """Evaluations read back from the store, so no genome is redone."""
        evaluations = []
        for record in records:
            self.measured[record.genome] = record.measurement
            if record.sass_hash and record.measurement.ok:
                self.by_hash.setdefault(record.sass_hash, record.measurement)
            evaluations.append(self.evaluation(record.genome, record.measurement))
        self.tally.resumed += len(records)
        return evaluations

    def evaluation(self, genome: Genome, measurement: Measurement) -> Evaluation:
        if not measurement.ok:
            return Evaluation(genome, tuple(math.inf for _ in self.goal.minimize), math.inf, measurement.status)
        metrics = dict(measurement.metrics)
        violation = sum(holds(c, metrics, self.baseline) for c in self.goal.require)
        return Evaluation(genome, self.goal.scores(metrics), violation)

    def __call__(self, genomes: list[Genome]) -> list[Evaluation]:
        """Evaluate a batch; each result is stored the moment it is measured,
        so an interruption loses only what is still compiling."""
        flags = [self.flags_for(g) for g in genomes]
        if self.compiles:
            finished = compile_each([replace(self.job, flags=f, ptxas=self.program_for(g))
                                     for g, f in zip(genomes, flags)], self.workers)
        else:
            finished = ((i, None) for i in range(len(genomes)))
        done: dict[int, Evaluation] = {}
        for index, result in finished:
            genome = genomes[index]
            measurement, digest = self._measure_once(genome, flags[index], result)
            self.measured[genome] = measurement
            self.store.append(Record(genome, flags[index], measurement, digest, self.context))
            self.tally.evaluated += 1
            if not measurement.ok:
                self.tally.count_failure(measurement)
            done[index] = self.evaluation(genome, measurement)
        return [done[i] for i in range(len(genomes))]

    def _measure_once(self, genome, flag_list, result) -> tuple[Measurement, str]:
        digest = sass_hash(result.cubin) if result is not None and result.ok else ""
        if digest and digest in self.by_hash:
            self.tally.reused += 1
            return replace(self.by_hash[digest], reused=True), digest
        measurement = self.measure(genome, flag_list, result)
        if isinstance(measurement, tuple):          # replay returns (measurement, recorded hash)
            measurement, digest = measurement
        if digest and measurement.ok:
            self.by_hash[digest] = measurement
        return measurement, digest
