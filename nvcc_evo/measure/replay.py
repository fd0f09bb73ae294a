"""The replay backend: answers from a recorded results store, no compiler,
no GPU. For tests and for comparing search strategies at no cost."""
from __future__ import annotations

from pathlib import Path

from nvcc_evo.measure import Measurement
from nvcc_evo.space import Genome
from nvcc_evo.store import Record, Store

NAME = "replay"


class Replay:
    def __init__(self, records: list[Record]):
        self.answers: dict[Genome, Record] = {r.genome: r for r in records}

    @classmethod
    def from_file(cls, path: Path) -> "Replay":
        return cls(Store(path).read())

    def measure(self, genome: Genome) -> tuple[Measurement, str]:
        """(the recorded measurement, its SASS hash); not-recorded if absent."""
        record = self.answers.get(genome)
        if record is None:
            return Measurement("not-recorded", detail=f"no recorded answer for {genome}"), ""
        return record.measurement, record.sass_hash
