"""Search spaces and genomes, with the small seeded operators evolve uses.

A genome fixes one value for each knob of a unit's search space. `None` means
"flag not passed" (the toolkit's own behaviour); the baseline genome is all
defaults. Operators are pure functions of their inputs and an explicit
`numpy.random.Generator`, so a seed reproduces a search.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Callable

import numpy as np

from nvcc_evo.acf import knobs, model
from nvcc_evo.acf.bench.spec import require_holds, require_names
from nvcc_evo.acf.edit.spelling import show_value
from nvcc_evo.acf.knobs import Scalar
from nvcc_evo.acf.sources import define_values, source_default, source_defines

COUNT_LIMIT = 100_000      # combinations of constrained defines enumerated to count a space's
                           # points
UNSEEN_LIMIT = 200_000     # points of a space looked at, in order, for one not yet seen
TRIES = 32                 # draws an operator makes before it falls back to a point the requires
                           # allow

# Searched when a unit gives no search block: knobs that change codegen but
# not results (docs/acf.md, the knob table), kept to what the toolkit takes.
DEFAULT_SPACE: tuple[tuple[str, tuple], ...] = (
    ("ptxas.opt_level", (1, 2, 3)),
    ("ptxas.register_usage_level", tuple(range(0, 11))),
    ("ptxas.maxrregcount", (None, 32, 40, 48, 64, 80, 96, 128, 168, 255)),
    ("ptxas.dlcm", (None, "ca", "cg")),
    ("ptxas.disable_optimizer_constants", (False, True)),
)


@dataclass(frozen=True)
class Dimension:
    knob: str
    choices: tuple          # ordered: neighbours in the tuple are neighbours for mutation
    baseline: Scalar | None
    pinned: bool = False
    unordered: bool = False  # the ACF's `unordered`: no choice lies between two others

    @property
    def numeric(self) -> bool:
        """More than two choices (the default left aside), all numbers, and not declared
        unordered: a model may read them as ordered and near each other (engine.surrogate,
        engine.bayes)."""
        values = [c for c in self.choices if c is not None]
        return (not self.unordered and len(values) > 2
                and all(isinstance(c, (int, float)) and not isinstance(c, bool) for c in values))

    def __str__(self) -> str:
        shown = ", ".join("default" if c is None else str(c) for c in self.choices)
        return (f"{self.knob} in {{{shown}}}" + (" unordered" if self.unordered else "")
                + (" (pinned)" if self.pinned else ""))


@dataclass(frozen=True)
class Genome:
    """A point of a search space: (knob, value) in the space's order; hashable."""

    items: tuple[tuple[str, Scalar | None], ...]

    def value(self, knob: str) -> Scalar | None:
        return dict(self.items)[knob]

    def settings(self) -> dict[str, Scalar]:
        """The knob values a build passes (None: nothing to pass)."""
        return {k: v for k, v in self.items if v is not None}

    def __str__(self) -> str:
        # spelled as the ACF spells it (false, not False)
        shown = [f"{k}={show_value(v)}" for k, v in self.items if v is not None]
        return " ".join(shown) or "(defaults)"


@dataclass(frozen=True)
class SearchSpace:
    dimensions: tuple[Dimension, ...]
    # The search block's requires over defines, and the source's own
    # #define values for names no dimension gives (a genome they exclude is
    # never proposed).
    requires: tuple[model.SpaceRequire, ...] = ()
    source_defines: tuple[tuple[str, object], ...] = ()

    def allows(self, genome: Genome) -> bool:
        """Every require holds for the genome's defines."""
        if not self.requires:
            return True
        defines = {**dict(self.source_defines), **define_values(genome.settings())}
        return all(require_holds(r, defines) for r in self.requires)

    @cached_property
    def size(self) -> int:
        """Points of the space the requires allow (counted over the defines
        they name, where those have at most COUNT_LIMIT combinations)."""
        total = int(np.prod([len(d.choices) for d in self.dimensions])) if self.dimensions else 1
        named = set(require_names(self.requires))
        constrained = [d for d in self.dimensions if knobs.is_define(d.knob)
                       and d.knob[len(knobs.DEFINE_PREFIX):] in named]
        combinations = int(np.prod([len(d.choices) for d in constrained])) if constrained else 1
        if not self.requires or combinations > COUNT_LIMIT:
            return total
        base = dict(self.baseline().items)
        allowed = sum(self.allows(Genome(tuple({**base, **dict(zip((d.knob for d in constrained),
                                                                   values))}.items())))
                      for values in itertools.product(*(d.choices for d in constrained)))
        return total // combinations * allowed

    def baseline(self) -> Genome:
        return Genome(tuple((d.knob, d.baseline) for d in self.dimensions))

    def __contains__(self, genome: Genome) -> bool:
        """A genome of this space (a stored one may be of an earlier space)."""
        return len(genome.items) == len(self.dimensions) and all(
            knob == d.knob and value in d.choices
            for (knob, value), d in zip(genome.items, self.dimensions))

    def genome(self, values: dict) -> Genome:
        """A genome from knob values; missing knobs take the baseline, and
        values outside a dimension snap to its baseline."""
        items = []
        for d in self.dimensions:
            value = values.get(d.knob, d.baseline)
            items.append((d.knob, value if value in d.choices else d.baseline))
        return repair(Genome(tuple(items)), self)

    def __str__(self) -> str:
        return "; ".join(str(d) for d in self.dimensions) + f" ({self.size} points)"


def baseline_defines(source: Path, space: "SearchSpace") -> dict:
    """Values of source parameters a bench expression may name at the
    space's baseline: the source's own #defines, then the baselines and pins
    of the space."""
    baselines = {d.knob: d.baseline for d in space.dimensions if d.baseline is not None}
    return {**source_defines(source), **define_values(baselines)}


def _baseline(knob_name: str, source: Path | None) -> Scalar | None:
    if knobs.is_define(knob_name):
        return source_default(source, knob_name[len(knobs.DEFINE_PREFIX):]) if source else None
    knob = knobs.lookup(knob_name)
    assert knob is not None                    # (a resolved space: every knob is known)
    return knob.normalise(knob.default) if knob.default is not None else None


def build_space(unit: model.Unit, source: Path | None,
                accepts: Callable[[str], bool] = lambda name: True) -> SearchSpace:
    """The unit's search block (or DEFAULT_SPACE) and its pins, fixed (a pin
    outside the search block is a one-value dimension), with only knobs the
    toolkit takes (`accepts`)."""
    entries = [(s.knob, model.domain_values(s.domain))
               for s in unit.space] if unit.space else list(DEFAULT_SPACE)
    unordered = {s.knob for s in unit.space if s.unordered}
    pins = {p.knob: p.value for p in unit.pins}
    dimensions = []
    for name, values in entries:
        if not accepts(name):
            continue
        knob = knobs.lookup(name)
        norm = knob.normalise if knob is not None else (lambda v: v)
        baseline = _baseline(name, source)
        choices = tuple(dict.fromkeys(norm(v) if v is not None else None for v in values))
        if name in pins:
            dimensions.append(Dimension(name, (norm(pins[name]),), norm(pins[name]), pinned=True))
            continue
        if baseline not in choices:
            choices = (baseline, *choices)
        dimensions.append(Dimension(name, choices, baseline, unordered=name in unordered))
    searched = {name for name, _ in entries}
    for name, value in pins.items():  # pinned but not searched: still built and benched with it
        if name not in searched and accepts(name):
            knob = knobs.lookup(name)
            value = knob.normalise(value) if knob is not None else value
            dimensions.append(Dimension(name, (value,), value, pinned=True))
    defaults = tuple(source_defines(source).items()) if source and unit.requires else ()
    return SearchSpace(tuple(dimensions), unit.requires, defaults)


# ---------------------------------------------------------------- operators
# Each operator draws until the space's requires allow its result (TRIES
# draws), else falls back to its input: it never proposes an excluded genome
# unless handed one. Without requires the first draw is taken, so the random
# stream of an unconstrained search is what it always was.
def _allowed(space: SearchSpace, draw: Callable[[], Genome], fallback: Genome) -> Genome:
    for _ in range(TRIES if space.requires else 1):
        genome = draw()
        if space.allows(genome):
            return genome
    return fallback


def sample(space: SearchSpace, rng: np.random.Generator) -> Genome:
    def draw() -> Genome:
        items = tuple((d.knob, d.choices[rng.integers(len(d.choices))]) for d in space.dimensions)
        return repair(Genome(items), space)
    return _allowed(space, draw, space.baseline())


def spread(space: SearchSpace, rng: np.random.Generator, count: int,
           fresh: Callable[[Genome], bool], draws: int = 16) -> list[Genome]:
    """Up to `count` fresh points far apart, a first generation that covers
    the space: of `draws` times as many samples, greedily the one farthest
    from those taken (the distance: each dimension's choices as positions in
    [0, 1], summed over the dimensions)."""
    drawn = (sample(space, rng) for _ in range(draws * count))
    pool = list(dict.fromkeys(g for g in drawn if fresh(g)))
    if len(pool) <= count:
        return pool
    scale = [max(1, len(d.choices) - 1) for d in space.dimensions]
    where = np.array([[d.choices.index(v) / n for (_, v), d, n in zip(g.items, space.dimensions,
                                                                      scale)]
                      for g in pool])
    apart = np.array([d.unordered for d in space.dimensions])   # any two choices 1 apart

    def distance(to: int) -> np.ndarray:
        gap = np.abs(where - where[to])
        return np.where(apart, gap > 0, gap).sum(axis=1)

    taken = [int(rng.integers(len(pool)))]
    nearest = distance(taken[0])
    while len(taken) < count:
        taken.append(int(np.argmax(nearest)))
        nearest = np.minimum(nearest, distance(taken[-1]))
    return [pool[i] for i in taken]


def crossover(a: Genome, b: Genome, rng: np.random.Generator,
              space: SearchSpace | None = None) -> Genome:
    """Uniform crossover: each gene from either parent (a child the space's
    requires exclude is drawn again, else parent `a`)."""
    def draw() -> Genome:
        take = rng.random(len(a.items)) < 0.5
        return Genome(tuple(x if pick else y for x, y, pick in zip(a.items, b.items, take)))
    return draw() if space is None else _allowed(space, draw, a)


def mutate(genome: Genome, space: SearchSpace, rng: np.random.Generator,
           rate: float | None = None) -> Genome:
    return _allowed(space, lambda: _mutate(genome, space, rng, rate), genome)


def _mutate(genome: Genome, space: SearchSpace, rng: np.random.Generator,
            rate: float | None) -> Genome:
    """Each gene changes with probability `rate` (default 1/len): to a
    neighbouring choice half the time (ordered domains), else to any choice
    (an unordered one: always to any)."""
    rate = rate if rate is not None else 1.0 / max(1, len(space.dimensions))
    items = []
    for (knob, value), d in zip(genome.items, space.dimensions):
        if len(d.choices) > 1 and rng.random() < rate:
            index = d.choices.index(value)
            if rng.random() < 0.5 and not d.unordered:
                index = min(len(d.choices) - 1, max(0, index + (1 if rng.random() < 0.5 else -1)))
            else:
                index = int(rng.integers(len(d.choices)))
            value = d.choices[index]
        items.append((knob, value))
    return repair(Genome(tuple(items)), space)


def step(genome: Genome, space: SearchSpace, rng: np.random.Generator) -> Genome:
    """Change exactly one gene, to a neighbouring choice (an unordered knob's: any other): a
    local move from a good point, which crossover of two good points rarely makes."""
    return _allowed(space, lambda: _step(genome, space, rng), genome)


def _step(genome: Genome, space: SearchSpace, rng: np.random.Generator) -> Genome:
    movable = [i for i, d in enumerate(space.dimensions) if len(d.choices) > 1]
    if not movable:
        return genome
    i = movable[int(rng.integers(len(movable)))]
    choices = space.dimensions[i].choices
    at = choices.index(genome.items[i][1])
    if space.dimensions[i].unordered:
        index = (at + 1 + int(rng.integers(len(choices) - 1))) % len(choices)
    else:
        index = at + (1 if rng.random() < 0.5 else -1)
        if not 0 <= index < len(choices):
            index = at - (index - at)          # at an end: the only neighbour is inward
    items = list(genome.items)
    items[i] = (items[i][0], choices[index])
    return repair(Genome(tuple(items)), space)


def unseen(space: SearchSpace, fresh: Callable[[Genome], bool], count: int,
           limit: int = UNSEEN_LIMIT) -> list[Genome]:
    """Up to `count` points of the space, in its order, that `fresh` takes
    and that are their own repair (points a build can use as they are): what
    a search proposes when random draws keep finding only points it has
    seen, so that it stops only when the space is searched whole (or after
    `limit` points looked at, in a huge space with tight requires)."""
    found: list[Genome] = []
    for looked, values in enumerate(itertools.product(*(d.choices for d in space.dimensions))):
        if len(found) >= count or looked >= limit:
            break
        genome = Genome(tuple(zip((d.knob for d in space.dimensions), values)))
        if repair(genome, space) == genome and fresh(genome):
            found.append(genome)
    return found


# Combinations that mean nothing to the toolkit, made meaningful:
# (condition on the genome, knob to reset, why).
REPAIRS: tuple[tuple, ...] = (
    (lambda g: g.get("ptxas.override_directive_values") and g.get("ptxas.maxrregcount") is None
     and g.get("nvcc.maxrregcount") is None, "ptxas.override_directive_values",
     "overriding directives needs a register cap"),
    (lambda g: g.get("ptxas.maxrregcount") is not None and g.get("nvcc.maxrregcount") is not None,
     "ptxas.maxrregcount", "nvcc's -maxrregcount wins over ptxas's; keep one"),
    (lambda g: g.get("ptxas.minnctapersm") is not None and g.get("ptxas.maxntid") is None,
     "ptxas.minnctapersm", "min CTAs per SM only acts with a block-size hint"),
    # ptxas 13.0: "Conflicting options -opt-level=<0,2,3> and --Ofast-compile=min"
    # (knobs.level_refused, the build's rule too; tests/data/recorded/spill_space.jsonl holds such
    # failures): the -Ofc level gives way, else (pinned) the -O level.
    *((lambda g, fast=fast: _level_refused(g, fast), fast, "ptxas refuses this -O level with this "
                                                           "-Ofc level")
      for fast in sorted(knobs.FAST_COMPILE)),
    (lambda g: any(_level_refused(g, fast) for fast in knobs.FAST_COMPILE), "ptxas.opt_level",
     "ptxas refuses this -O level with a pinned -Ofc level"),
)


def _level_refused(genome: dict, fast: str) -> bool:
    return knobs.level_refused(knobs.passed("ptxas.opt_level", genome.get("ptxas.opt_level")),
                               knobs.passed(fast, genome.get(fast)))


def repair(genome: Genome, space: SearchSpace) -> Genome:
    """Combinations the toolkit cannot use made usable (REPAIRS); then, where
    the space's requires exclude the genome, the defines they name reset to
    their baselines one at a time, in the space's order, until they allow it."""
    values = dict(genome.items)
    baselines = {d.knob: d.baseline for d in space.dimensions}
    for applies, knob, _ in REPAIRS:
        if knob in values and applies(values):
            values[knob] = baselines[knob]
    repaired = Genome(tuple((k, values[k]) for k, _ in genome.items))
    named = set(require_names(space.requires))
    for d in space.dimensions:
        if space.allows(repaired):
            break
        define = knobs.is_define(d.knob) and d.knob[len(knobs.DEFINE_PREFIX):] in named
        if define and d.knob in values:
            values[d.knob] = d.baseline
            repaired = Genome(tuple((k, values[k]) for k, _ in genome.items))
    return repaired
