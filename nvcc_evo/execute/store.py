"""Results store: an append-only JSONL file, one line per evaluation, written
(and flushed to disk) as soon as the evaluation is measured.

Each line carries its context: toolkit, source fingerprint, target arch,
device, backend, the build's command line and the environment that matters.
A search reads back only the lines of its own context, so an interrupted
search resumes where it stopped and results from another device, toolkit or
source are never mixed in. Appends take the file's lock, and a last line cut
short by a crash is ended before the next one, so it never swallows it.
"""
from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nvcc_evo.errors import EnvironmentProblem, EvoError
from nvcc_evo.measure import Measurement, Wrong
from nvcc_evo.cubin.compile import SharedOverflow, overflow_of
from nvcc_evo.cubin.occupancy import LaunchRefusal
from nvcc_evo.engine.space import Genome
from nvcc_evo.status import Status
from nvcc_evo.system.jsonlines import JsonLines
from nvcc_evo.system.locks import Wait


@dataclass(frozen=True)
class Context:
    toolkit: str
    fingerprint: str
    arch: str
    device: str            # GPU name, or "cpu" for static measurements
    backend: str
    unit: str
    build: str             # hash of the build's command line and environment

    @property
    def key(self) -> str:
        return hashlib.sha256(json.dumps(self.__dict__, sort_keys=True).encode()).hexdigest()[:16]

    def differences(self, other: "Context") -> list[str]:
        return [f"{name}: {getattr(other, name)!r} there, {getattr(self, name)!r} here"
                for name in self.__dict__ if getattr(self, name) != getattr(other, name)]


@dataclass(frozen=True)
class StoredResult:
    genome: Genome
    flags: tuple[str, ...]
    measurement: Measurement
    sass_hash: str
    context: Context
    time: float = field(default=0.0, compare=False)     # when it was measured (seconds since the
                                                        # epoch)


class MixedResults(EvoError):
    """Recorded results come from another context than the one asked for."""


def _encode(record: StoredResult) -> str:
    m = record.measurement
    return json.dumps({
        "context_key": record.context.key, "context": record.context.__dict__,
        "genome": [list(item) for item in record.genome.items], "flags": list(record.flags),
        "status": m.status, "metrics": dict(m.metrics), "spreads": dict(m.spreads),
        "detail": m.detail[-2000:], "sass_hash": record.sass_hash, "time": time.time(),
        "costs": {stage: round(seconds, 6) for stage, seconds in m.costs},
        **({"refusal": [list(m.refusal.block), *m.refusal[1:]]} if m.refusal is not None else {}),
        **({"raced": True} if m.raced else {}),
        # (null: not said)
        **({"wrong": m.wrong and m.wrong.value} if m.status == Status.WRONG_ANSWER else {}),
        # (null: none)
        **({"overflow": m.overflow and list(m.overflow)}
           if m.status == Status.COMPILE_ERROR else {}),
    })


CONTEXT_FIELDS = tuple(Context.__dataclass_fields__)
STATUSES = frozenset(status.value for status in Status)
RACED_BEFORE = "raced:"         # how stores written before the raced field say it: their detail's
                                # first word
UNWRITTEN_BEFORE = "NaN or unwritten elements"   # how they said Wrong.UNWRITTEN: words of a wrong
                                                 # answer's detail
WRONGS = frozenset(wrong.value for wrong in Wrong)


class OtherShape(ValueError):
    """Valid JSON, but not a result line of this shape (another version's, an edit, a stranger's
    store)."""


def _number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _numbers(data: Any, what: str) -> tuple[tuple[str, float], ...]:
    if not isinstance(data, dict) or not all(isinstance(k, str) and _number(v)
                                             for k, v in data.items()):
        raise OtherShape(f"{what} is not an object of numbers")
    return tuple((k, float(v)) for k, v in data.items())


def _genome(data: Any) -> Genome:
    scalar = (str, int, float, bool, type(None))
    if not isinstance(data, list) or not all(
            isinstance(item, list) and len(item) == 2 and isinstance(item[0], str)
            and isinstance(item[1], scalar) for item in data):
        raise OtherShape("genome is not a list of [knob, value] pairs")
    return Genome(tuple((knob, value) for knob, value in data))


def _context(data: Any) -> Context:
    if not isinstance(data, dict) or sorted(data) != sorted(CONTEXT_FIELDS) or \
            not all(isinstance(v, str) for v in data.values()):
        raise OtherShape("context is not this version's")
    return Context(**data)


def _strings(data: Any, what: str) -> tuple[str, ...]:
    if not isinstance(data, list) or not all(isinstance(v, str) for v in data):
        raise OtherShape(f"{what} is not a list of strings")
    return tuple(data)


def _refusal(data: Any) -> LaunchRefusal | None:
    """A launch refusal's fields as stored (none: None)."""
    if data is None:
        return None
    if not (isinstance(data, list) and len(data) == len(LaunchRefusal._fields)
            and isinstance(data[0], list) and len(data[0]) == 3 and isinstance(data[1], str)
            and all(isinstance(v, int) for v in data[0] + data[2:])):
        raise OtherShape("refusal is not this version's")
    return LaunchRefusal((data[0][0], data[0][1], data[0][2]), data[1], *data[2:])


def _decode(line: str) -> StoredResult:
    """One result line; OtherShape (a ValueError) for any JSON of another shape."""
    data = json.loads(line)
    if not isinstance(data, dict):
        raise OtherShape("not an object")
    status, detail, sass = data.get("status"), data.get("detail"), data.get("sass_hash")
    if not (isinstance(status, str) and status in STATUSES and isinstance(detail, str)
            and isinstance(sass, str) and _number(data.get("time", 0.0))):
        raise OtherShape("status, detail, sass_hash or time is not this version's")
    metrics = _numbers(data.get("metrics"), "metrics")
    raced = data.get("raced", detail.startswith(RACED_BEFORE))
    if not isinstance(raced, bool):
        raise OtherShape("raced is not this version's")
    measurement = Measurement(Status(status), metrics, _numbers(data.get("spreads"), "spreads"),
                              detail,
                              costs=_numbers(data.get("costs", {}), "costs"),
                              refusal=_refusal(data.get("refusal")),
                              raced=raced, wrong=_wrong(data, status, detail),
                              overflow=_overflow(data, status, detail))
    return StoredResult(_genome(data.get("genome")), _strings(data.get("flags"), "flags"),
                        measurement, sass,
                        _context(data.get("context")), float(data.get("time", 0.0)))


def _overflow(data: dict, status: str, detail: str) -> SharedOverflow | None:
    """What ptxas refused a compile for, as stored; a store written before the field has ptxas's own
    words in a compile error's detail."""
    if "overflow" not in data:
        return overflow_of(detail) if status == Status.COMPILE_ERROR else None
    given = data["overflow"]
    if given is None:
        return None
    if not (isinstance(given, list) and len(given) == 2 and all(isinstance(v, int) for v in given)):
        raise OtherShape("overflow is not this version's")
    return SharedOverflow(*given)


def _wrong(data: dict, status: str, detail: str) -> Wrong | None:
    """What a wrong answer's check found, as stored; a store written before the field says an
    unwritten output in its detail's words."""
    if "wrong" not in data:
        unwritten = status == Status.WRONG_ANSWER and UNWRITTEN_BEFORE in detail
        return Wrong.UNWRITTEN if unwritten else None
    if data["wrong"] is not None and data["wrong"] not in WRONGS:
        raise OtherShape("wrong is not this version's")
    return Wrong(data["wrong"]) if data["wrong"] is not None else None


class Store:
    def __init__(self, path: Path, wait: Wait = Wait()):
        self.path = path
        self.lines = JsonLines(path, wait)

    @property
    def skipped(self) -> int:
        """Lines the last read skipped: cut short, garbage, another shape."""
        return self.lines.skipped

    def read(self) -> list[StoredResult]:
        """Every complete line; a line cut short by a crash is skipped."""
        return self.lines.read(_decode)

    def for_context(self, context: Context) -> tuple[list[StoredResult], list[Context]]:
        """(records of this context, the other contexts found)."""
        mine, others = [], {}
        for record in self.read():
            if record.context == context:
                mine.append(record)
            else:
                others[record.context.key] = record.context
        return mine, list(others.values())

    def append(self, record: StoredResult) -> None:
        """One line, synced, under the store's lock (system.jsonlines)."""
        try:
            self.lines.append(_encode(record))
        except OSError as error:
            raise self._cannot(error) from None

    def _cannot(self, error: OSError) -> EnvironmentProblem:
        return EnvironmentProblem(f"cannot append to the results store {self.path}: "
                                  f"{error.strerror or error} "
                                  "(the evaluations written before are kept; the same command "
                                  "resumes from them)")


def require_same_context(records: list[StoredResult], context: Context, source: str) -> None:
    """Replay refuses answers recorded elsewhere, naming both sides."""
    foreign = {r.context.key: r.context for r in records if r.context != context}
    if foreign and not any(r.context == context for r in records):
        first = next(iter(foreign.values()))
        raise MixedResults(f"{source} was recorded for another context; refusing to mix: "
                           + "; ".join(context.differences(first)))
