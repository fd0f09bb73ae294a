"""Measurement backends: interchangeable answers to "how good is this build?".

Every backend takes a compiled candidate and returns a Measurement: metric
name -> value (lower is better), optional spreads, and a status. The search
engine never knows which backend answered.

- static: ptxas's resource report and the cubin (no GPU)
- command: a user command that builds with the candidate and prints a metric
- replay: answers recorded in a results store (tests, comparisons)
- pycuda: real kernel timing on the GPU (nvcc_evo.measure.pycuda)
"""
from __future__ import annotations

from dataclasses import dataclass, field


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


BACKENDS = ("static", "command", "replay", "pycuda")


def failed(status: str, detail: str) -> Measurement:
    return Measurement(status, detail=detail[-4000:])
