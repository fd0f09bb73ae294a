"""Curated starting points ("booster packs", readable): per kernel family,
knob sets that won on an H200, offered as seeds to a new unit's first
generation. The data is nvcc_evo/engine/boosters.toml (package data)."""
from __future__ import annotations

import sys
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:                              # Python 3.10
    import tomli as tomllib


@dataclass(frozen=True)
class Seed:
    family: str
    origin: str                     # where it won
    knobs: tuple[tuple[str, object], ...]

    def __str__(self) -> str:
        return f"{self.family} seed from {self.origin}"


@dataclass(frozen=True)
class Family:
    name: str
    names: tuple[str, ...]          # parts of a source's file name (`sgemm_regblock` has `gemm`)
    text: tuple[str, ...]           # substrings of its text
    seeds: tuple[Seed, ...]

    def covers(self, name: str, text: str) -> bool:
        return any(part in name.lower() for part in self.names) or any(t in text for t in self.text)


def families(data: str | None = None) -> tuple[Family, ...]:
    if data is None:
        data = resources.files(__package__).joinpath("boosters.toml").read_text()
    found = []
    for family in tomllib.loads(data)["family"]:
        seeds = tuple(Seed(family["name"], s["from"], tuple(s["knobs"].items()))
                      for s in family.get("seed", ()))
        found.append(Family(family["name"], tuple(family.get("names", ())),
                            tuple(family.get("text", ())), seeds))
    return tuple(found)


def family_of(source: Path | None) -> Family | None:
    """The first family whose names or text the source has; None if none does."""
    if source is None:
        return None
    try:
        text = source.read_text(errors="replace")
    except OSError:
        text = ""
    return next((f for f in families() if f.covers(source.stem, text)), None)
