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

Imports: nvcc_evo.acf (bench specs), nvcc_evo.driver (the compiled
candidate), nvcc_evo.errors and nvcc_evo.system; never nvcc_evo.search.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable


@dataclass(frozen=True)
class Measurement:
    status: str                                   # ok, compile-error, timeout, crash, wrong-answer, ...
    metrics: tuple[tuple[str, float], ...] = ()
    spreads: tuple[tuple[str, float], ...] = ()
    detail: str = ""                              # stderr or the reason, kept for the user
    reused: bool = field(default=False, compare=False)

    @property
    def ok(self) -> bool:
        return self.status == "ok"

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
    # baseline and the chosen candidate, each (genome, compile result),
    # returns (a stats.Verdict of the interleaved re-measurement, the problem
    # found on fresh inputs or "").
    confirm: Callable | None = None
    drift: Callable = lambda: None      # the baseline measured again: its relative change, or None
    primary: tuple[str, ...] = ()       # what to tune when the unit's tune block names nothing measurable
    maximize: tuple[str, ...] = ()      # objectives where higher is better (a bench command's rates)
    build: str = ""                     # what else builds and measures a candidate (a bench command): in the results' key


BACKENDS = ("static", "command", "replay", "pycuda")


def failed(status: str, detail: str) -> Measurement:
    return Measurement(status, detail=detail[-4000:])
