"""The table of measurement backends: one row per backend, the one place a
backend is defined. Code asks a backend's row what it does (`row(name)`:
whether it needs a GPU, rebuilds the project, measures compiler facts only,
its default budget, ...) and never compares its name
(tests/test_architecture.py reads the sources for such a comparison); the
row names its factory (`factory`, "module:function", imported by
execute.measurers.backend_for when a retune makes the backend), so that
adding a backend is one row and the function that makes it.

Read by the settings (the values `retune.backend` takes), the command line's
help, the retune (which backends time running code, the bench block each
needs, its budget) and the search (a test checks that every row's factory
makes a backend with the capabilities the row says). Kept at the bottom
layer, so that the drop-in driver's settings may read it without importing
the backends.

Imports: the standard library only.
"""
from __future__ import annotations

import math
from typing import NamedTuple

INF = math.inf

AUTO = "auto"          # not a backend: the one its row's `auto` says, with a GPU or without


class Row(NamedTuple):
    name: str
    what: str                 # in `retune.backend`'s help (`--retune --help`)
    factory: str              # "module:function" that makes it from what a retune knows
                              # (execute.measurers.Wanted)
    bench: str = ""           # the bench block's form it runs (the model's field), "" when it needs
                              # none
    bench_form: str = ""      # that form, as it is written
    times: bool = False       # it measures running code (a static entry is not up to date for it)
    compiles: bool = True     # candidates are compiled before they are measured
    # Compiler facts are its only objectives (registers, spills): they cannot rank speed, so its
    # goal is guarded (retune.search.speedsafe), an entry a timing backend measured stays, and its
    # own entries wait for one.
    facts_only: bool = False
    # It loads candidates' cubins and times their kernels alone on a GPU (this machine's or the
    # cluster's): the target is what that GPU runs, a ptxas release the GPU's driver cannot load is
    # refused, each GPU is a lane.
    needs_gpu: bool = False
    # It rebuilds the project and runs a whole program per candidate (the unit's bench command), on
    # whichever GPU the machine shows: one search at a time, a unit never built is built by its
    # command first, and the outputs it rebuilt are left to be built again.
    rebuilds: bool = False
    auto: str = ""            # when `auto` stands for it ("" where it never does)
    # Its optional capabilities (measure.backend.Backend): None or False where a backend has none.
    confirm: bool = False     # re-measures winner and baseline, interleaved, and judges
    drift: bool = False       # the baseline measured again between generations
    end_drift: bool = False   # ... or once, after the search (a rebuild and a run)
    race: bool = False        # stops timing clearly slower candidates (the fast protocol)
    fresh_baseline: bool = False   # the baseline is measured in every retune, before any candidate
    # Its default budget per unit and target, where the user gives none
    # (retune.scope.options.decide_options): a time where candidates are timed, a count where the
    # answers do not depend on the machine's load; and why, said with the budget before a search
    # (retune.scope.options.describe).
    seconds: float = INF
    evaluations: float = 60   # a cap (inf: none)
    budget_why: str = "compiler facts, the same on any machine, so a count reproduces the run"


_FACTORIES = "nvcc_evo.execute.measurers:"
TABLE = (
    Row("pycuda", "kernel time and energy on the GPU", _FACTORIES + "make_pycuda", "kernel",
        "bench { kernel ... }", times=True, needs_gpu=True, auto="PyCUDA and a GPU are there",
        confirm=True, drift=True, race=True, fresh_baseline=True,
        seconds=180.0, evaluations=INF, budget_why="kernels timed on the GPU, hundreds of binaries "
                                                   "a minute"),
    Row("static", "ptxas facts, no GPU", _FACTORIES + "make_static", facts_only=True,
        auto="no PyCUDA GPU here"),
    Row("command", "the unit's bench command", _FACTORIES + "make_command", "command",
        "bench { command ...; metric ... }", times=True, rebuilds=True,
        confirm=True, end_drift=True,
        seconds=300.0, evaluations=INF, budget_why="a build and a run of the project's command per "
                                                   "candidate"),
    Row("replay", "a recorded results store: --replay", _FACTORIES + "make_replay", compiles=False,
        budget_why="recorded answers, so a count reproduces the run"),
)
BACKENDS = {row.name: row for row in TABLE}
NAMES = tuple(BACKENDS)
CHOICES = (AUTO,) + NAMES          # what `retune.backend` and `--backend` take
# What a name no row has answers (`auto` before it is resolved, an entry another version wrote): no
# capability.
UNKNOWN = Row("", "", "")


def row(name: str | None) -> Row:
    """The row of the backend named `name`; UNKNOWN for a name no row has (None: an entry never
    tuned)."""
    return BACKENDS.get(name or "", UNKNOWN)


def auto_choice(gpu: bool) -> str:
    """The backend `auto` stands for: the one that needs a GPU where one is there, else the one that
    needs none."""
    return next(row.name for row in TABLE if row.auto and row.needs_gpu == gpu)


def help_text() -> str:
    """What `retune.backend` says of its values (the settings' table, `--backend`'s help): each row
    in the table's order, then auto, in the words of the rows it stands for."""
    with_gpu = BACKENDS[auto_choice(True)]
    return ("what measures a candidate: " + ", ".join(f"{row.name} ({row.what})" for row in TABLE)
            + f", or {AUTO} ({with_gpu.name} when {with_gpu.auto}, else {auto_choice(False)})")
