"""Measurement backends: interchangeable answers to "how good is this build?".

Every backend takes a compiled candidate and returns a Measurement: metric
name -> value (lower is better), optional spreads, and a status. A Measurer
is what the search holds of a backend: the function it calls per candidate,
and, where the backend has them, the confirmation step (winner and baseline
measured again, interleaved, and judged) and the baseline's drift. The
search engine never knows which backend answered.

- static: ptxas's resource report and the cubin (no GPU)
- command: a user command that builds with the candidate and prints a metric
- replay: answers recorded in a results store (tests, comparisons)
- pycuda: real kernel timing on the GPU (nvcc_evo.measure.gpu, its worker
  process in gpu_worker, the statistics in stats)

candidate (one candidate compiled as the build compiles it, the SASS hash)
is what every backend measures; sass and occupancy say what a kernel's
build holds and what it allows on an SM.

Imports: nvcc_evo.acf (bench specs), nvcc_evo.driver (the build's flags and
steps), nvcc_evo.errors and nvcc_evo.system; never the layers above it
(engine, execute, retune, report).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable

if TYPE_CHECKING:
    from nvcc_evo.measure.stats import Verdict


RACED = "raced:"


@dataclass(frozen=True)
class Measurement:
    status: str                                   # ok, compile-error, timeout, crash, wrong-answer, ...
    metrics: tuple[tuple[str, float], ...] = ()
    spreads: tuple[tuple[str, float], ...] = ()
    detail: str = ""                              # stderr or the reason, kept for the user
    reused: bool = field(default=False, compare=False)
    # Where this candidate's time went, seconds per stage (COST_STAGES): kept
    # in the results store, summed in the retune's progress line and report.
    costs: tuple[tuple[str, float], ...] = field(default=(), compare=False)

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def raced(self) -> bool:
        """Timed only until it was clearly slower than the incumbent."""
        return self.detail.startswith(RACED)

    def get(self, name: str, default: float = float("inf")) -> float:
        return dict(self.metrics).get(name, default)

    def __str__(self) -> str:
        shown = ", ".join(f"{k}={v:g}" for k, v in self.metrics)
        return f"{self.status}: {shown}" if shown else self.status


@dataclass(frozen=True)
class Measurer:
    measure: Callable                   # (genome, flags, compile result) -> Measurement
    objectives: tuple[str, ...]
    compiles: bool = True               # candidates are compiled before they are measured
    device: str = "cpu"                 # goes into the results' context
    describe: str = ""
    hello: dict | None = None           # the GPU's name, compute capability and driver
    # The confirmation step, None where the backend has none: given the
    # baseline's genome, the chosen one's and `build` (genome -> its
    # CompileResult, compiled as the search compiled it; the backend builds
    # what it needs, and only that), returns a Confirmation.
    confirm: Callable | None = None
    drift: Callable = lambda: None      # the baseline measured again: its relative change, or None
    # The backend keeps what the baseline's run left (the GPU's reference
    # outputs, the run its drift repeats): the baseline is measured in every
    # retune before any candidate, whatever the results store holds of it.
    fresh_baseline: bool = False
    # A drift too slow to ask between generations (a rebuild and a run of the
    # project's command): given the baseline's genome and Measurement, asked
    # once, after the search; its relative change, or None.
    end_drift: Callable | None = None
    # Racing, None where the backend does not race: told the best feasible
    # runtime so far and its spread, it stops timing clearly slower candidates.
    race: Callable | None = None
    primary: tuple[str, ...] = ()       # what to tune when the unit's tune block names nothing measurable
    maximize: tuple[str, ...] = ()      # objectives where higher is better (a bench command's rates)
    build: str = ""                     # what else builds and measures a candidate (a bench command): in the results' key
    # Seconds the steps after the search (confirm, end_drift) are expected to
    # take at most, known once the baseline is measured: kept back from a time
    # budget, so that a search that runs out of time still confirms and writes.
    reserve: Callable[[], float] = lambda: 0.0
    # Told the time (time.monotonic()) the steps after the search must end by
    # (a time budget's end): a sequential confirmation fits its rounds into it.
    finish_by: Callable[[float], None] = lambda deadline: None


@dataclass(frozen=True)
class Confirmation:
    """What a backend's confirmation found: the interleaved re-measurement's
    verdict (None where it never got that far) and, in the backend's own
    words, what failed ("" when nothing did). A problem keeps the baseline,
    whatever the verdict."""

    verdict: "Verdict | None"
    problem: str = ""


BACKENDS = ("static", "command", "replay", "pycuda")

# The stages of one candidate's cost, in the order they run: the compile
# (on the CPU, in parallel), then on the GPU the module load and the inputs
# copied in (load), the first launch with its outputs copied back and
# compared (check), warm-up launches, the timed launches, the energy window;
# `other`: the rest of the backend's time (a user command's run, say).
COST_STAGES = ("compile", "load", "check", "warm-up", "timing", "energy", "other")


def failed(status: str, detail: str) -> Measurement:
    return Measurement(status, detail=detail[-4000:])
