"""What one search has measured: a record the Evaluator (execute.evaluate)
writes and everyone after it reads.

`Measured` holds each genome's measurement and its binary's SASS hash, the
measurement of each binary (so a candidate whose binary was measured before
reuses it), the failed compiles of candidates not yet measured, the
baseline's metrics the goal's relative conditions are read against, the tally
and the seconds each candidate took. It is written only through its methods,
by the Evaluator (from several lanes' threads: under the Evaluator's guard),
and read by the learners (execute.learned), the choice, the summary and the
write-back; the engine receives its evaluations (`evaluations`), the
engine's own type.
"""
from __future__ import annotations

import math
import statistics
import time
from types import MappingProxyType
from dataclasses import dataclass, field, replace
from typing import Iterator, Mapping

from nvcc_evo.cubin.compile import SharedOverflow
from nvcc_evo.cubin.occupancy import LaunchRefusal
from nvcc_evo.engine.fronts import Evaluation
from nvcc_evo.engine.space import Genome, SearchSpace
from nvcc_evo.execute.goal import Goal
from nvcc_evo.execute.store import Context, StoredResult
from nvcc_evo.measure import COST_STAGES, Measurement, Wrong
from nvcc_evo.status import Status


def first_problem(detail: str, width: int = 160) -> str:
    """The line of a failure's stderr a user reads first: the first that says
    error (or fatal), else the last non-empty one."""
    lines = [line.strip() for line in detail.splitlines() if line.strip()]
    said = next((line for line in lines if "error" in line.lower() or "fatal" in line.lower()),
                lines[-1] if lines else "(no message)")
    return said if len(said) <= width else said[:width - 3] + "..."


@dataclass
class Failures:
    """The failures of one status: how many, and the first one's words."""

    count: int
    example: str


@dataclass
class Tally:
    """What this run of a search did, counted for its progress line and summary."""

    evaluated: int = 0
    reused: int = 0          # same SASS as an earlier candidate: its measurement reused
    resumed: int = 0         # read back from the results store
    failed: int = 0
    failures: dict[Status, Failures] = field(default_factory=dict)
    raced: int = 0           # timing stopped early: clearly slower than the incumbent
    ptxas_only: int = 0      # built from an earlier candidate's PTX: only ptxas ran
    costs: dict[str, float] = field(default_factory=dict)     # stage -> seconds, summed over this
                                                              # run's candidates
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
        seen = self.failures.setdefault(measurement.status,
                                        Failures(0, first_problem(measurement.detail)))
        seen.count += 1

    def most_failures(self) -> list[tuple[Status, Failures]]:
        """Each status that failed, the most frequent first."""
        return sorted(self.failures.items(), key=lambda item: -item[1].count)

    def failures_text(self) -> str:
        """`compile-error 14 (e.g. "ptxas error : ..."); timeout 1 (...)`, or ""."""
        return "; ".join(f'{status} {seen.count} (e.g. "{seen.example}")'
                         for status, seen in self.most_failures())


@dataclass
class Measured:
    """What one search (one context: `context`) has measured so far, scored by `goal`."""

    goal: Goal
    context: Context
    tally: Tally = field(default_factory=Tally)
    _measurements: dict[Genome, Measurement] = field(default_factory=dict)
    _digests: dict[Genome, str] = field(default_factory=dict)           # a genome's binary's SASS
                                                                        # hash ("" if none)
    _binaries: dict[str, Measurement] = field(default_factory=dict)     # SASS hash -> its
                                                                        # measurement (ok only)
    _refusals: dict[Genome, Measurement] = field(default_factory=dict)  # failed compiles, known
                                                                        # before measuring
    _baseline: dict[str, float] = field(default_factory=dict)           # the baseline's metrics
                                                                        # (relative conditions)
    _paces: list[float] = field(default_factory=list)                   # seconds each measured
                                                                        # candidate took

    # ------------------------------------------------------------ read
    def __contains__(self, genome: object) -> bool:
        return genome in self._measurements

    def __iter__(self) -> Iterator[Genome]:
        return iter(self._measurements)

    def __len__(self) -> int:
        return len(self._measurements)

    def __getitem__(self, genome: Genome) -> Measurement:
        return self._measurements[genome]

    @property
    def measurements(self) -> Mapping[Genome, Measurement]:
        """Each genome's measurement (a read-only view: written through `record`)."""
        return MappingProxyType(self._measurements)

    @property
    def baseline(self) -> Mapping[str, float]:
        """The baseline's metrics, which relative conditions (`<= 1.05 baseline`) are read
        against."""
        return MappingProxyType(self._baseline)

    def digest(self, genome: Genome) -> str:
        """The SASS hash of the genome's binary ("" where none is known)."""
        return self._digests.get(genome, "")

    @property
    def digests(self) -> Mapping[Genome, str]:
        """Each genome's binary's SASS hash (a read-only view)."""
        return MappingProxyType(self._digests)

    def known(self, genome: Genome) -> Measurement | None:
        """The genome's measurement, else its refused compile's (`refuse`), else None."""
        return self._measurements.get(genome) or self._refusals.get(genome)

    def refusal(self, genome: Genome) -> LaunchRefusal | None:
        """Why the driver would refuse the genome's launch, where a backend said so."""
        known = self.known(genome)
        return known.refusal if known is not None else None

    def wrong(self, genome: Genome) -> Wrong | None:
        """What the check of the genome's outputs found wrong, where a backend said so."""
        known = self.known(genome)
        return known.wrong if known is not None else None

    def overflow(self, genome: Genome) -> SharedOverflow | None:
        """The static shared memory over ptxas's limit its compile was refused for, where it was."""
        known = self.known(genome)
        return known.overflow if known is not None else None

    def evaluation(self, genome: Genome, measurement: Measurement) -> Evaluation:
        """A measurement scored by the goal (a failure: infinite objectives, its status)."""
        if not measurement.ok:
            return Evaluation(genome, tuple(math.inf for _ in self.goal.minimize), math.inf,
                              measurement.status)
        metrics = dict(measurement.metrics)
        return Evaluation(genome, self.goal.scores(metrics),
                          self.goal.violation(metrics, self._baseline))

    def evaluations(self, space: SearchSpace) -> list[Evaluation]:
        """The evaluations of the space's points measured so far (what a resumed engine has
        seen)."""
        return [self.evaluation(g, m) for g, m in self._measurements.items() if g in space]

    def searched(self, space: SearchSpace) -> int:
        """Evaluations of the space made so far, the baseline aside (the budget's count)."""
        baseline = space.baseline()
        return sum(1 for genome in self._measurements if genome in space and genome != baseline)

    def reused(self, digest: str, costs: tuple[tuple[str, float], ...]) -> Measurement | None:
        """The measurement of a binary measured before (its SASS hash), marked reused with this
        candidate's own `costs`, and counted; None where the binary is new."""
        measurement = self._binaries.get(digest) if digest else None
        if measurement is None:
            return None
        self.tally.reused += 1
        return replace(measurement, reused=True, costs=costs)

    def typical_pace(self) -> float:
        """The median seconds a candidate took to measure (0 before the first)."""
        return statistics.median(self._paces) if self._paces else 0.0

    # ------------------------------------------------------------ write
    def resume(self, records: list[StoredResult]) -> list[Evaluation]:
        """Evaluations read back from the store, so no genome is redone."""
        for record in records:
            self._measurements[record.genome] = record.measurement
            self._digests[record.genome] = record.sass_hash
            if record.sass_hash and record.measurement.ok:
                self._binaries.setdefault(record.sass_hash, record.measurement)
        self.tally.resumed += len(records)
        return [self.evaluation(record.genome, record.measurement) for record in records]

    def forget(self, genome: Genome) -> None:
        """A genome read back from the store, to be measured again: its
        measurement, and its binary's, no longer stand in for a new one."""
        self._measurements.pop(genome, None)
        self._binaries.pop(self._digests.pop(genome, ""), None)

    def record(self, genome: Genome, measurement: Measurement, digest: str,
               ptxas_only: int = 0) -> Evaluation:
        """A candidate's measurement (and its binary's SASS hash), counted (`ptxas_only`: the
        candidates so far built from an earlier one's PTX); its evaluation."""
        self._measurements[genome] = measurement
        self._digests[genome] = digest
        self.tally.evaluated += 1
        self.tally.ptxas_only = ptxas_only
        self.tally.count_costs(measurement)
        self.tally.raced += measurement.raced and not measurement.reused
        if not measurement.ok:
            self.tally.count_failure(measurement)
        return self.evaluation(genome, measurement)

    def remember_binary(self, digest: str, measurement: Measurement) -> None:
        """A binary's measurement, for later candidates with the same SASS."""
        if digest and measurement.ok:
            self._binaries[digest] = measurement

    def refuse(self, genome: Genome, failure: Measurement) -> None:
        """A candidate's compile failed (`failure`: its measurement), known to the learners before
        it is measured."""
        self._refusals[genome] = failure

    def paced(self, seconds: float) -> None:
        """One candidate's measure took `seconds`."""
        self._paces.append(seconds)

    def set_baseline(self, metrics: Mapping[str, float]) -> None:
        """The baseline's metrics, once measured: relative conditions are read against them from now
        on."""
        self._baseline.clear()
        self._baseline.update(metrics)
