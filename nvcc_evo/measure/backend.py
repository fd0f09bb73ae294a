"""The contract of a measurement backend: what the search holds of one.

Every backend measures a candidate (`measure`: the genome, its flags and
its compile, None where the backend does not compile; a Measurement back)
and says what it is (`objectives` it answers, whether candidates are
`compiles`d first, the `device` and the GPU's `hello`, `describe` for the
log, the `primary` metrics and those it `maximize`s, and the `build` that
is part of how candidates are built). Its optional capabilities are None
(or False) where it has none, as the table in nvcc_evo.backends says of
each:

- `confirm`: winner and baseline measured again, interleaved, and judged
  (a Confirmation);
- `drift`: the baseline measured again between generations;
- `end_drift`: the same, asked once after the search (too slow to ask between
  generations: a rebuild and a run of the project's command);
- `race`: told the incumbent, later candidates' timing stops once they are
  clearly slower;
- `fresh_baseline`: the backend keeps what the baseline's run left (the
  GPU's reference outputs), so the baseline is measured in every retune
  before any candidate, whatever the results store holds of it;
- `reserve` (what the steps after the search take, kept back from a time
  budget) and `finish_by` (told the search's `system.clock.Deadline`, which
  they must end by): 0 and nothing by default.

The orchestrator asks, it does not reach in: a backend-specific step sits
behind these names. `Composed` is a backend made of its functions: what the
factories (execute.measurers), the lanes and the cluster build.
"""
from __future__ import annotations

from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any, Callable, Protocol

from nvcc_evo.measure import Confirmation, Measurement
from nvcc_evo.system.clock import Deadline

if TYPE_CHECKING:
    from nvcc_evo.cubin.compile import CompileResult


class Measure(Protocol):
    def __call__(self, genome: Any, flags: tuple[str, ...],
                 result: "CompileResult | None") -> Measurement: ...


class ConfirmStep(Protocol):
    """Given the baseline's genome, the chosen one's and `build` (genome -> its
    CompileResult, compiled as the search compiled it; the backend builds what
    it needs, and only that)."""

    def __call__(self, baseline: Any, chosen: Any,
                 build: Callable[[Any], "CompileResult"]) -> Confirmation: ...


class Drift(Protocol):
    def __call__(self) -> float | None: ...      # the baseline's relative change, or None


class EndDrift(Protocol):
    # against `first`, its measurement
    def __call__(self, genome: Any, first: Measurement) -> float | None: ...


class Race(Protocol):
    # the best feasible runtime so far
    def __call__(self, median: float, spread: float) -> None: ...


class Backend(Protocol):
    @property
    def objectives(self) -> tuple[str, ...]: ...
    @property
    def compiles(self) -> bool: ...
    @property
    def device(self) -> str: ...                 # goes into the results' context
    @property
    def describe(self) -> str: ...
    @property
    def hello(self) -> dict | None: ...          # the GPU's name, compute capability and driver
    # what to tune when the tune block names nothing measurable
    @property
    def primary(self) -> tuple[str, ...]: ...
    # objectives where higher is better (a bench command's rates)
    @property
    def maximize(self) -> tuple[str, ...]: ...
    # what else builds a candidate (a bench command): in the results' key
    @property
    def build(self) -> str: ...
    # The optional capabilities (see the module's docstring).
    @property
    def confirm(self) -> ConfirmStep | None: ...
    @property
    def drift(self) -> Drift | None: ...
    @property
    def end_drift(self) -> EndDrift | None: ...
    @property
    def race(self) -> Race | None: ...
    @property
    def fresh_baseline(self) -> bool: ...

    def measure(self, genome: Any, flags: tuple[str, ...],
                result: "CompileResult | None") -> Measurement: ...
    def reserve(self) -> float: ...
    def finish_by(self, deadline: Deadline) -> None: ...


def _no_reserve() -> float:
    return 0.0


def _no_deadline(deadline: Deadline) -> None:
    return None


@dataclass(frozen=True)
class Composed:
    """A Backend made of its functions (see Backend for each)."""

    measure: Measure
    objectives: tuple[str, ...]
    compiles: bool = True
    device: str = "cpu"
    describe: str = ""
    hello: dict | None = None
    confirm: ConfirmStep | None = None
    drift: Drift | None = None
    fresh_baseline: bool = False
    end_drift: EndDrift | None = None
    race: Race | None = None
    primary: tuple[str, ...] = ()
    maximize: tuple[str, ...] = ()
    build: str = ""
    # Seconds the steps after the search (confirm, end_drift) are expected to
    # take at most, known once the baseline is measured: kept back from a time
    # budget, so that a search that runs out of time still confirms and writes.
    reserve: Callable[[], float] = _no_reserve
    # Told the search's Deadline, which the steps after the search must end by
    # (the time budget's end): a sequential confirmation fits its rounds into it.
    finish_by: Callable[[Deadline], None] = _no_deadline


def composed(backend: Backend, **changes: Any) -> Composed:
    """`backend` as a Composed, with `changes` (a wrapper's own measure,
    race or description: the lanes', the cluster's)."""
    members = {f.name: getattr(backend, f.name) for f in fields(Composed)}
    return Composed(**{**members, **changes})
