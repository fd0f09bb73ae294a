"""Measurement backends: interchangeable answers to "how good is this build?".

Every backend takes a compiled candidate and returns a Measurement: metric
name -> value (lower is better), optional spreads, and a status. What the
search holds of a backend is the `Backend` protocol (measure.backend): the
function it calls per candidate and the optional capabilities (the
confirmation step, drift, racing, a fresh baseline); nvcc_evo.backends is
the table of backends. The search engine never knows which backend answered.

- static: ptxas's resource report and the cubin (no GPU)
- command: a user command that builds with the candidate and prints a metric
  (the package nvcc_evo.measure.command)
- replay: answers recorded in a results store (tests, comparisons)
- pycuda: real kernel timing on the GPU (the package nvcc_evo.measure.pycuda:
  its measuring processes, their pipe; the statistics in stats)

What every backend measures is a candidate compiled as the build compiles
it (nvcc_evo.cubin: the compile, the SASS hash, the kernels' facts).

Imports: nvcc_evo.acf (bench specs), nvcc_evo.driver (the build's flags and
steps), nvcc_evo.cubin, nvcc_evo.backends, nvcc_evo.errors and nvcc_evo.system; never the layers
above it (engine, execute, retune, report).
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING

from nvcc_evo.status import Status

if TYPE_CHECKING:
    from nvcc_evo.cubin.compile import SharedOverflow
    from nvcc_evo.cubin.occupancy import LaunchRefusal
    from nvcc_evo.measure.stats import Verdict


class Wrong(str, Enum):
    """What an outputs' check found wrong, as a fact (measure.check.Mismatch; its words are for
    people): str-valued, so the results store keeps the word."""

    UNWRITTEN = "unwritten"      # NaN in a checked output: never written (outputs poisoned first)
    UNEQUAL = "unequal"          # elements that differ under an exact check
    OUTSIDE = "outside"          # elements outside the bench's tolerances
    UNCHECKED = "unchecked"      # no reference to compare with

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class Measurement:
    status: Status                                # ok, compile-error, timeout, crash, ...
    metrics: tuple[tuple[str, float], ...] = ()
    spreads: tuple[tuple[str, float], ...] = ()
    detail: str = ""                              # stderr or the reason, kept for the user
    reused: bool = field(default=False, compare=False)
    # Where this candidate's time went, seconds per stage (COST_STAGES): kept
    # in the results store, summed in the retune's progress line and report.
    costs: tuple[tuple[str, float], ...] = field(default=(), compare=False)
    # The binary's SASS hash where a backend knows it without a compile (replay: the recorded one).
    sass_hash: str = field(default="", compare=False)
    # launch-refused: why the driver would refuse it, as a fact
    refusal: "LaunchRefusal | None" = None
    # timed only until it was clearly slower than the incumbent
    raced: bool = False
    # wrong-answer: what the outputs' check found (None: not said)
    wrong: Wrong | None = None
    # compile-error: ptxas refused its static shared memory
    overflow: "SharedOverflow | None" = None

    @property
    def ok(self) -> bool:
        return self.status == Status.OK

    def get(self, name: str, default: float = float("inf")) -> float:
        return dict(self.metrics).get(name, default)

    def __str__(self) -> str:
        shown = ", ".join(f"{k}={v:g}" for k, v in self.metrics)
        return f"{self.status}: {shown}" if shown else self.status


@dataclass(frozen=True)
class Confirmation:
    """What a backend's confirmation found: the interleaved re-measurement's
    verdict (None where it never got that far) and, in the backend's own
    words, what failed ("" when nothing did). A problem keeps the baseline,
    whatever the verdict."""

    verdict: "Verdict | None"
    problem: str = ""


# The stages of one candidate's cost, in the order they run: the compile
# (on the CPU, in parallel), then on the GPU the module load and the inputs
# copied in (load), the first launch with its outputs copied back and
# compared (check), warm-up launches, the timed launches, the energy window;
# `other`: the rest of the backend's time (a user command's run, say).
COST_STAGES = ("compile", "load", "check", "warm-up", "timing", "energy", "other")


class Clock:
    """Seconds per stage of one request (COST_STAGES)."""

    def __init__(self) -> None:
        self.costs: dict[str, float] = {}
        self.last = time.perf_counter()

    def lap(self, stage: str) -> dict[str, float]:
        now = time.perf_counter()
        self.costs[stage] = self.costs.get(stage, 0.0) + now - self.last
        self.last = now
        return self.costs


def failed(status: Status, detail: str, refusal: "LaunchRefusal | None" = None,
           wrong: Wrong | None = None, overflow: "SharedOverflow | None" = None) -> Measurement:
    return Measurement(status, detail=detail[-4000:], refusal=refusal, wrong=wrong,
                       overflow=overflow)
