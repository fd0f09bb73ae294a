"""The settings whose values are specs (`retune.gpus`, `retune.cluster`, a
target): their forms, which driver.settings checks wherever a value comes
from (so that a bad one stops a retune before anything starts, saying where
it is), and the typed values execute receives (`gpus`, `ray_place`), parsed
by the same forms once."""
from __future__ import annotations

import re
from dataclasses import dataclass

from nvcc_evo.errors import UsageError

FORMS = {
    "gpus": (re.compile(r"\s*(?:all|count:([1-9][0-9]*)|([0-9]+(?:\s*,\s*[0-9]+)*))\s*"),
             "all, count:N or device numbers (0 or 0,2)"),
    "cluster": (re.compile(r"\s*(auto|ray://\S+|local(?::([1-9][0-9]*))?)\s*"), "ray://HEAD:PORT, auto, local or local:N"),
    "target": (re.compile(r"sm_[0-9]{2,3}[af]?"), "a SASS architecture such as sm_90 or sm_90a"),
}


@dataclass(frozen=True)
class Gpus:
    """`retune.gpus`: the first `count` GPUs, these `devices`, or (neither) every GPU of --device's model."""

    text: str                          # as given, for messages
    count: int = 0
    devices: tuple[int, ...] = ()


@dataclass(frozen=True)
class RayPlace:
    """`retune.cluster`: the cluster at `address` (ray://HEAD:PORT, or auto: the one `ray start` made this
    machine a node of), or (None) a Ray of this machine with `workers` (None: as many as its cores)."""

    text: str                          # as given, for messages
    address: str | None = None
    workers: int | None = None


def _formed(form: str, flag: str, text: str) -> re.Match:
    found = FORMS[form][0].fullmatch(text)
    if found is None:
        raise UsageError(f"{flag} {text}: expected {FORMS[form][1]}")
    return found


def gpus(text: str | None) -> Gpus | None:
    """`retune.gpus` parsed (None: unset); UsageError where it is not of its form."""
    if text is None:
        return None
    count, numbers = _formed("gpus", "--gpus", text).groups()
    return Gpus(text, int(count or 0), tuple(int(n) for n in numbers.split(",")) if numbers else ())


def ray_place(text: str | None) -> RayPlace | None:
    """`retune.cluster` parsed (None: unset, this machine); UsageError where it is not of its form."""
    if not text:
        return None
    word, workers = _formed("cluster", "--cluster", text).groups()
    return RayPlace(text, None if word.startswith("local") else word, int(workers) if workers else None)
