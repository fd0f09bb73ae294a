"""Which programs this run has started, so that the verbs that promise to
build and tune nothing (`--explain`, `--retune --dry-run`) can say what they
did run: the toolkit's probes of the nvcc and ptxas a settings file may
name, the GPU query. One call per program start, from the few places that
start them on those paths.

Imports: the standard library only.
"""
from __future__ import annotations

import threading
from collections import Counter

_ran: Counter = Counter()            # (program, why) -> times
_lock = threading.Lock()


def note(program: str, why: str) -> None:
    with _lock:
        _ran[(str(program), why)] += 1


def said() -> str:
    """`PROGRAM ×N (why)`, one per program and reason; "nothing" when none ran."""
    with _lock:
        return "; ".join(f"{program} x{count} ({why})"
                         for (program, why), count in sorted(_ran.items())) \
            or "nothing (every answer was cached)"
