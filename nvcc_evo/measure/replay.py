"""The replay backend: answers from recorded results, no compiler, no GPU.
For tests and for comparing search strategies at no cost. The records come
from a results store (nvcc_evo.execute.store reads them; this backend only
needs each record's genome, measurement and SASS hash)."""
from __future__ import annotations

from dataclasses import replace
from typing import Generic, Hashable, Iterable, Protocol, TypeVar

from nvcc_evo.measure import Measurement
from nvcc_evo.status import Status


class Recorded(Protocol):
    """What a record of the store (execute.store.StoredResult) gives the replay."""

    @property
    def genome(self) -> Hashable: ...

    @property
    def measurement(self) -> Measurement: ...

    @property
    def sass_hash(self) -> str: ...


R = TypeVar("R", bound=Recorded)


class Replay(Generic[R]):
    def __init__(self, records: Iterable[R]):
        self.answers: dict[Hashable, R] = {r.genome: r for r in records}

    def measure(self, genome: Hashable, flags: tuple[str, ...] = (),
                result: object = None) -> Measurement:
        """The recorded measurement, with its SASS hash (`sass_hash`); not-recorded if absent."""
        record = self.answers.get(genome)
        if record is None:
            return Measurement(Status.NOT_RECORDED, detail=f"no recorded answer for {genome}")
        return replace(record.measurement, sass_hash=record.sass_hash)
