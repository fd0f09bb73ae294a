"""A search's time budget as one value: `Deadline`, the one clock of a
search, asked by the engine (time left to search?), the evaluator (time
for one more candidate?) and the backend (time for one more confirmation
round?), so that none of them does its own arithmetic against the budget.

Imports: the standard library only.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass


@dataclass(frozen=True)
class Deadline:
    """`seconds` from `origin` (a time.monotonic() reading: the search's
    start), of which the last `reserve` are kept for the steps after the
    search (a confirmation, drift runs, the ship check), so that a search
    that runs out of time still confirms and writes its choice within it.
    An infinite `seconds` is no time limit."""

    origin: float
    seconds: float = math.inf
    reserve: float = 0.0

    @classmethod
    def from_now(cls, seconds: float = math.inf, reserve: float = 0.0) -> Deadline:
        return cls(time.monotonic(), seconds, reserve)

    @property
    def limited(self) -> bool:
        return math.isfinite(self.seconds)

    @property
    def search_seconds(self) -> float:
        """The seconds the search itself may take, from `origin` (the reserve left out)."""
        return max(0.0, self.seconds - self.reserve)

    def search_left(self) -> float:
        """Seconds left to search (inf: no limit; 0 once the reserve is reached)."""
        if not self.limited:
            return math.inf
        return max(0.0, self.origin + self.search_seconds - time.monotonic())

    def left(self) -> float:
        """Seconds left of the whole budget, the reserve included: what the steps after the search
        end by."""
        if not self.limited:
            return math.inf
        return max(0.0, self.origin + self.seconds - time.monotonic())


NONE = Deadline(0.0)       # no time limit
