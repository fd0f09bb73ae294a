"""The table of measurement backends: one row per backend, read by the
settings (the values `retune.backend` takes), the command line's help, the
retune (which backends time running code, the bench block each needs) and
the search (execute.measurers makes each row's backend; a test checks that
every row has a factory and that what it makes has the capabilities the row
says).

A row says what a backend is, not how it runs: the names, the words for
them, and the optional capabilities of measure.backend's `Backend` protocol
it has. Kept at the bottom layer (the standard library only), so that the
drop-in driver's settings may read it without importing the backends.

Imports: the standard library only.
"""
from __future__ import annotations

import math
from typing import NamedTuple

INF = math.inf

AUTO = "auto"          # not a backend: the GPU where PyCUDA and a device are there, else static
AUTO_WHAT = "pycuda when PyCUDA and a GPU are there, else static"


class Row(NamedTuple):
    name: str
    what: str                 # in `retune.backend`'s help (`--retune --help`)
    bench: str = ""           # the bench block's form it runs (the model's field), "" when it needs none
    bench_form: str = ""      # that form, as it is written
    times: bool = False       # it measures running code (a static entry is not up to date for it)
    compiles: bool = True     # candidates are compiled before they are measured
    # Its optional capabilities (measure.backend.Backend): None or False where a backend has none.
    confirm: bool = False     # re-measures winner and baseline, interleaved, and judges
    drift: bool = False       # the baseline measured again between generations
    end_drift: bool = False   # ... or once, after the search (a rebuild and a run)
    race: bool = False        # stops timing clearly slower candidates (the fast protocol)
    fresh_baseline: bool = False   # the baseline is measured in every retune, before any candidate
    # Its default budget per unit and target, where the user gives none (retune.options.decided): a time where
    # candidates are timed, a count where the answers do not depend on the machine's load; and why.
    seconds: float = INF
    evaluations: float = 60   # a cap (inf: none)
    budget_why: str = "compiler facts, the same on any machine: a count reproduces the run"


TABLE = (
    Row("pycuda", "kernel time and energy on the GPU", "kernel", "bench { kernel ... }", times=True,
        confirm=True, drift=True, race=True, fresh_baseline=True,
        seconds=180.0, evaluations=INF, budget_why="kernels timed on the GPU: hundreds of binaries a minute"),
    Row("static", "ptxas facts, no GPU"),
    Row("command", "the unit's bench command", "command", "bench { command ...; metric ... }", times=True,
        confirm=True, end_drift=True,
        seconds=300.0, evaluations=INF, budget_why="a build and a run of the project's command per candidate"),
    Row("replay", "a recorded results store: --replay", compiles=False, budget_why="recorded answers: a count reproduces the run"),
)
BACKENDS = {row.name: row for row in TABLE}
NAMES = tuple(BACKENDS)
CHOICES = (AUTO,) + NAMES          # what `retune.backend` and `--backend` take
TIMING = tuple(row.name for row in TABLE if row.times)


def help_text() -> str:
    """What `retune.backend` says of its values (the settings' table, `--backend`'s help): each row in the
    table's order, then auto."""
    return ("what measures a candidate: " + ", ".join(f"{row.name} ({row.what})" for row in TABLE)
            + f", or {AUTO} ({AUTO_WHAT})")
