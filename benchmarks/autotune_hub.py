"""Brute-forced auto-tuning spaces: Kernel Tuner caches (`*.json.gz`, the
benchmark hub's format) read as a space the engine can search and a table
of answers a replay looks up.

A cache holds `tune_params` (the space), `tune_params_keys` (their order)
and `cache`: one record per configuration with its parameters, `time` (ms,
the objective) or an error string, and what Kernel Tuner spent on it
(`compile_time`, `verification_time`, `benchmark_time`, ms). The space is
what Kernel Tuner's own `tune_cache` makes of a cache: the configurations
recorded without an error (its restrictions); a replayed evaluation costs
what Kernel Tuner's simulation runner charges, compile + verification +
benchmark time, so every strategy spends the same simulated budget.
"""
from __future__ import annotations

import gzip
import json
import math
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

import numpy as np

from nvcc_evo.engine.space import Dimension, Genome, SearchSpace

COST_KEYS = ("compile_time", "verification_time", "benchmark_time")   # what the simulation charges, ms


@dataclass(frozen=True)
class Answer:
    value: float          # the objective (time, ms)
    cost: float           # simulated ms spent to learn it


@dataclass(frozen=True)
class RecordedSpace(SearchSpace):
    """The space of one cache: every dimension's values, and only the
    configurations recorded without an error allowed (Kernel Tuner's
    restrictions inferred from a cache)."""

    allowed: frozenset = field(default=frozenset(), compare=False)

    def allows(self, genome: Genome) -> bool:
        return tuple(value for _, value in genome.items) in self.allowed

    @cached_property
    def size(self) -> int:
        return len(self.allowed)


@dataclass(frozen=True)
class HubSpace:
    """One brute-forced space: where it came from, its parameters and the
    answers for each allowed configuration (a tuple of values in
    `names` order)."""

    name: str                       # relative to the hub: kernel/GPU
    path: Path
    kernel: str
    names: tuple[str, ...]
    choices: tuple[tuple, ...]
    answers: dict = field(compare=False, repr=False)
    unordered: frozenset[str] = frozenset()     # parameters declared to name choices

    @cached_property
    def values(self) -> np.ndarray:
        return np.array([a.value for a in self.answers.values()])

    @cached_property
    def costs(self) -> np.ndarray:
        return np.array([a.cost for a in self.answers.values()])

    @cached_property
    def space(self) -> RecordedSpace:
        dims = tuple(Dimension(n, c, c[0], unordered=n in self.unordered)
                     for n, c in zip(self.names, self.choices))
        return RecordedSpace(dims, allowed=frozenset(self.answers))

    def answer(self, genome: Genome) -> Answer:
        return self.answers[tuple(value for _, value in genome.items)]

    def __str__(self) -> str:
        return f"{self.name} ({len(self.answers)} configurations of {math.prod(map(len, self.choices))})"


def _answer(record: dict) -> Answer | None:
    value = record.get("time")
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value):
        return None                 # an error string: outside the space, as Kernel Tuner infers it
    return Answer(float(value), float(sum(record.get(k, 0.0) for k in COST_KEYS)))


def load(path: Path, hub: Path, unordered: frozenset[str] = frozenset()) -> HubSpace:
    with gzip.open(path, "rt") as handle:
        cache = json.load(handle)
    names = tuple(cache["tune_params_keys"])
    answers = {}
    for record in cache["cache"].values():
        answer = _answer(record)
        if answer is not None:
            answers[tuple(record[n] for n in names)] = answer
    if not answers:
        raise ValueError(f"{path}: no configuration without an error")
    name = str(path.relative_to(hub)).removesuffix(".json.gz")
    return HubSpace(name, path, cache["kernel_name"], names,
                    tuple(tuple(cache["tune_params"][n]) for n in names), answers, unordered)


def find(hub: Path) -> list[Path]:
    """Every Kernel Tuner cache below the hub, in name order."""
    paths = sorted(hub.rglob("*.json.gz"))
    if not paths:
        raise FileNotFoundError(f"no *.json.gz Kernel Tuner cache below {hub}")
    return paths
