"""Evolve stage: NSGA-II over genomes, ask/tell, with constraints.

One engine serves one objective and several: with one objective the
non-dominated sort is a ranking and NSGA-II is an elitist GA with tournament
selection. Constraints use constrained domination (engine.fronts). The engine
never asks for a genome it has already seen, including those a resumed search
read back from the results store. With a `guide`, once ten evaluations
are told, a surrogate (engine.surrogate) proposes a share of each batch:
the likeliest good of many points drawn from what it learned; with `bayes`,
after two generations, a Gaussian process (engine.bayes) proposes a share by
Expected Improvement; the operators propose the rest (without either, all of
it: the default, chosen by leave-one-kernel-out on brute-forced spaces,
BENCHMARKS.md).
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Protocol, Sequence, TypeVar, runtime_checkable

import numpy as np

# The Pareto machinery (engine.fronts), by the names the engine's users have always imported from
# here.
from nvcc_evo.engine.bayes import Bayes, BayesProposer
from nvcc_evo.engine.fronts import (Evaluation, crowding_distance, dominates, hypervolume_2d,
                                    non_dominated_sort, pareto_front, survivors)
from nvcc_evo.engine.space import (Genome, SearchSpace, crossover, mutate, sample, spread, step,
                                   unseen)
from nvcc_evo.engine.surrogate import Guide, Surrogate, ranked
from nvcc_evo.system.clock import NONE

INF = math.inf
# Stagnation: after RESTART_AFTER generations with no new front point, SHAKE_STEP more of each
# generation (up to MAX_SHAKE) is random immigrants and jumps from the front (each gene
# changed with probability JUMP_RATE), beside the local steps and crossover.
RESTART_AFTER = 2
SHAKE_STEP = 0.25
MAX_SHAKE = 0.6
JUMP_RATE = 0.4
WARM_SEEDS = 3          # the best of each other context's evaluations seeded (warm starts)


class TimeLeft(Protocol):
    """What the search asks of its time budget (system.clock.Deadline is one)."""

    def search_left(self) -> float: ...         # seconds left to search (inf: no limit)


@dataclass(frozen=True)
class Budget:
    evaluations: float = 60      # a cap (inf: none)
    generations: float = INF
    patience: int | None = None  # generations without a new front point before stopping (None:
                                 # never)
    deadline: TimeLeft = NONE    # the search's time (system.clock.Deadline): asked, never computed
                                 # here

    def patient(self, progress: "Progress") -> bool:
        return self.patience is None or progress.stale_generations < self.patience


@dataclass
class Progress:
    generation: int = 0
    evaluations: int = 0
    stale_generations: int = 0
    started: float = field(default_factory=time.monotonic)
    resumed: int = 0          # evaluations read back before this run (counted in `evaluations`)

    def elapsed(self) -> float:
        return time.monotonic() - self.started


class Avoid(Protocol):
    """What the engine is told of failures, to propose none known to fail (execute.learned)."""

    def learn(self, evaluation: Evaluation) -> None: ...

    def forbids(self, genome: Genome) -> bool: ...


class Known(Protocol):
    """Evaluations made before this search, mapped into its space (execute.warm: the same unit in
    another context, a similar unit of the project): ranked on their own; `origin` says where they
    come from."""

    @property
    def origin(self) -> str: ...

    @property
    def evaluations(self) -> Sequence[Evaluation]: ...


class Engine:
    """Ask for genomes, tell their evaluations; NSGA-II in between."""

    def __init__(self, space: SearchSpace, rng: np.random.Generator, population: int = 12,
                 seeds: Sequence[Genome] = (), history: Sequence[Evaluation] = (),
                 local_share: float = 0.5,
                 avoid: "Avoid | None" = None, guide: Guide | None = None,
                 warm: Sequence[Known] = (), spread: bool = False, bayes: Bayes | None = None):
        self.space, self.rng, self.size, self.local_share = space, rng, population, local_share
        # `spread`: the first generation (after the seeds) drawn far apart (space.spread) where no
        # warm start says where to look; the default draws it at random (on brute-forced spaces the
        # two tie, and the random start does not lose a budget of one generation: BENCHMARKS.md).
        self.spread = spread and not warm
        # The surrogate (None: unguided); `warm`: groups of evaluations known before (the same unit
        # on another GPU or toolkit, a similar unit), each ranked on its own: their WARM_SEEDS best
        # seed the first generation, after `seeds`, and they start the surrogate.
        self.guide, self.model = guide, Surrogate(space, guide) if guide is not None else None
        known = [(group.origin, [e for e in group.evaluations if e.genome in space])
                 for group in warm]
        self.warm = [evaluations for _, evaluations in known if evaluations]
        self.guided = 0                 # proposals the surrogate made
        # `bayes`: a Gaussian process proposes a share of each batch by Expected Improvement
        self.bayes = BayesProposer(space, bayes) if bayes is not None else None
        # what the surrogate learns from
        self.modelled = {e.genome: e for e in history if e.genome in space}
        self.seen: dict[Genome, Evaluation] = {e.genome: e for e in history}
        self.pending: set[Genome] = set()
        self.population: list[Evaluation] = survivors(list(self.seen.values()), population)
        self.seeds = [g for g in dict.fromkeys(seeds) if g not in self.seen]
        self.warm_seeds: dict[str, int] = {}    # the first generation's seeds from each origin
                                                # (progress line)
        for origin, group in known:
            best = [g for g, ok in list(zip(*ranked(group, 0.0)[:2]))[:WARM_SEEDS] if ok]
            fresh = [g for g in dict.fromkeys(best) if g not in self.seen and g not in self.seeds]
            self.seeds += fresh
            if fresh:
                self.warm_seeds[origin] = self.warm_seeds.get(origin, 0) + len(fresh)
        self._front: list[Evaluation] = pareto_front(self.seen.values())
        self.stale = 0                  # generations told in a row with no new front point
        self.diversified = 0            # proposals made to leave a stagnation (immigrants, jumps)
        self.avoid = avoid              # what is known to fail (execute.learned): never proposed
        self.avoided: set[Genome] = set()
        if avoid is not None:
            for evaluation in history:
                avoid.learn(evaluation)

    def _fresh(self, genome: Genome, batch: list[Genome]) -> bool:
        """Not evaluated, asked for or in this batch, allowed by the space's
        requires and not known to fail (`avoid`)."""
        if genome in self.seen or genome in self.pending or genome in batch:
            return False
        if not self.space.allows(genome):
            return False
        if self.avoid is not None and self.avoid.forbids(genome):
            self.avoided.add(genome)
            return False
        return True

    def _tournament(self) -> Genome:
        a, b = (self.population[i] for i in self.rng.integers(len(self.population), size=2))
        if dominates(a, b):
            return a.genome
        if dominates(b, a):
            return b.genome
        return (a if self.rng.random() < 0.5 else b).genome

    def ask(self, count: int | None = None) -> list[Genome]:
        count = count or self.size
        batch: list[Genome] = []
        while self.seeds and len(batch) < count:
            seed = self.seeds.pop(0)
            if self._fresh(seed, batch):
                batch.append(seed)
        wanted = count - len(batch)
        if wanted > 0 and self._fitted():
            batch += self._modelled(wanted, batch)
        if len(batch) < count and self.bayes is not None:
            batch += self.bayes.propose(list(self.modelled.values()), count - len(batch), self.rng,
                                        lambda g: self._fresh(g, batch), self.warm)
        if len(batch) < count and self.spread and not self.seen and not self.pending:
            batch += spread(self.space, self.rng, count - len(batch),
                            lambda g: self._fresh(g, batch))
        if len(batch) < count:
            batch += self._offspring(count - len(batch), batch, tries=50 * count)
        if len(batch) < count:  # random draws find nothing new: the rest, in order
            batch += unseen(self.space, lambda g: self._fresh(g, batch), count - len(batch))
        self.pending.update(batch)
        return batch

    def _modelled(self, wanted: int, batch: list[Genome]) -> list[Genome]:
        """The guide's share of `wanted` (a fraction drawn as a chance): for each, the surrogate's
        best of `guide.candidates` fresh points drawn from its good density."""
        assert self.guide is not None and self.model is not None
        share = min(wanted, int(self.guide.share * wanted + self.rng.random()))
        drawn = self.model.draw(self.rng, self.guide.candidates * share)
        fresh = [g for g in dict.fromkeys(drawn) if self._fresh(g, batch)]
        best = np.argsort(-self.model.scores(fresh), kind="stable")[:share]
        self.guided += len(best)
        return [fresh[i] for i in sorted(best)]

    def _offspring(self, count: int, batch: list[Genome], tries: int) -> list[Genome]:
        """Up to `count` fresh proposals of the operators, none in `batch`, in at most `tries`
        draws."""
        found: list[Genome] = []
        tried = 0
        while len(found) < count and tried < tries:
            tried += 1
            child = self._child()
            if not self._fresh(child, batch + found) and tried % 5 == 0:
                child = sample(self.space, self.rng)   # crowded space: explore
            if self._fresh(child, batch + found):
                found.append(child)
        return found

    def _fitted(self) -> bool:
        """The surrogate learned from what is told so far and the warm starts (each of those
        counting `guide.warm` of one of this search's, less as this search tells as many); False:
        unguided."""
        if self.guide is None or self.model is None:
            return False
        told = list(self.modelled.values())
        warm = sum(map(len, self.warm))
        worth = self.guide.warm * max(0.0, 1.0 - len(told) / warm) if warm else 0.0
        if len(told) + worth * warm < self.guide.after:
            return False
        groups = [ranked(told, 1.0)] if told else []
        warmed = [ranked(group, worth) for group in self.warm if group and worth > 0]
        self.model.fit(groups + warmed)
        return True

    def _elite(self) -> Genome:
        return self._front[int(self.rng.integers(len(self._front)))].genome

    def _child(self) -> Genome:
        """One proposal: a local step from a front point or a crossover of
        two tournament winners, mutated. Stagnating (RESTART_AFTER generations
        without a new front point), a growing share (`shake`) are random
        immigrants and front points mutated hard, so the search keeps moving
        until its budget ends. (No extra draw when not stagnating: the
        random stream of a search that keeps improving is what it was.)"""
        if len(self.population) < 2:
            return sample(self.space, self.rng)
        shake = 0.0
        if self.stale >= RESTART_AFTER:
            shake = min(MAX_SHAKE, SHAKE_STEP * (self.stale - RESTART_AFTER + 1))
        if shake:
            draw = self.rng.random()
            if draw < shake / 2:
                self.diversified += 1
                return sample(self.space, self.rng)                        # an immigrant
            if draw < shake and self._front:
                self.diversified += 1
                # a jump from the front
                return mutate(self._elite(), self.space, self.rng, rate=JUMP_RATE)
        if self._front and self.rng.random() < self.local_share:
            return step(self._elite(), self.space, self.rng)
        return mutate(crossover(self._tournament(), self._tournament(), self.rng, self.space),
                      self.space, self.rng)

    def learn(self, failures: Sequence[Evaluation]) -> None:
        """Failures known before their batch is told (its refused compiles): taught to `avoid` at
        once."""
        if self.avoid is not None:
            for failure in failures:
                self.avoid.learn(failure)

    def tell(self, evaluations: Sequence[Evaluation]) -> bool:
        """Record results; True when one of them entered the Pareto front."""
        entered = False
        for evaluation in evaluations:
            self.seen[evaluation.genome] = evaluation
            if evaluation.genome in self.space:
                self.modelled[evaluation.genome] = evaluation
            self.pending.discard(evaluation.genome)
            entered |= self._offer(evaluation)
            if self.avoid is not None:
                self.avoid.learn(evaluation)
        self.population = survivors(self.population + list(evaluations), self.size)
        self.stale = 0 if entered else self.stale + 1
        return entered

    def _offer(self, candidate: Evaluation) -> bool:
        """Keep the front up to date, one point at a time."""
        if not candidate.feasible:
            return False
        if any(dominates(e, candidate) or e.objectives == candidate.objectives
               for e in self._front):
            return False
        self._front = [e for e in self._front if not dominates(candidate, e)] + [candidate]
        return True

    def front(self) -> list[Evaluation]:
        return sorted(self._front, key=lambda e: e.objectives)


Evaluate = Callable[[list[Genome]], list[Evaluation]]
Started = TypeVar("Started")
OnGeneration = Callable[[Progress, Engine], None]


@runtime_checkable
class Overlapping(Protocol[Started]):
    """An evaluate that compiles a batch while the one before it is measured
    (execute.evaluate.Evaluator): `start` begins a batch's compiles and
    returns at once, `finish` measures candidates begin..end-1 of it, and
    `refused` says its failed compiles once the whole batch has compiled
    (told to `avoid` before the next batch is bred)."""

    def start(self, genomes: list[Genome]) -> Started: ...

    def finish(self, started: Started, begin: int, end: int) -> list[Evaluation]: ...

    def refused(self, started: Started) -> list[Evaluation]: ...


def run_search(engine: Engine, evaluate: Evaluate, budget: Budget,
               on_generation: OnGeneration = lambda p, e: None, done: int = 0,
               overlap: bool = False) -> Progress:
    """The ask/tell loop, until the budget or the patience runs out. `done`:
    evaluations made before (read back from the results store); they count
    toward `budget.evaluations`, so a resumed search only reaches the budget.
    `overlap` (an evaluate that is also `Overlapping`): each batch is asked for and
    starts compiling before the one before it is measured, so the GPU waits
    for a generation's compiles only where they take longer than measuring
    a generation; the engine then breeds from results one generation old,
    the same ones for a given seed."""
    progress = Progress(evaluations=done, resumed=done)
    if overlap:
        if not isinstance(evaluate, Overlapping):
            raise TypeError("overlap asks for an evaluate with start, finish and refused "
                            "(engine.evolve.Overlapping)")
        return _overlapped(engine, evaluate, budget, on_generation, progress)
    while _within(progress, budget, 0):
        batch = engine.ask(_room(engine, budget, progress.evaluations))
        if not batch:
            break                                  # the space is exhausted
        if not _told(engine, progress, len(batch), evaluate(batch), on_generation):
            break                                  # the evaluator's time is up: it measured no more
    return progress


def _room(engine: Engine, budget: Budget, taken: int) -> int:
    """How many to ask for: a generation, or what is left of the budget's cap (a float: inf is
    none)."""
    return int(min(engine.size, budget.evaluations - taken))


def _within(progress: Progress, budget: Budget, pending: int) -> bool:
    return (progress.evaluations + pending < budget.evaluations and
            progress.generation < budget.generations
            and budget.deadline.search_left() > 0 and budget.patient(progress))


def _told(engine: Engine, progress: Progress, asked: int, evaluations: list[Evaluation],
          on_generation: OnGeneration) -> bool:
    """A generation's evaluations told (none: nothing told); False when fewer came back than were
    asked for (the evaluator's time is up), so the search ends."""
    if not evaluations:
        return False
    improved = engine.tell(evaluations)
    progress.generation += 1
    progress.evaluations += len(evaluations)
    progress.stale_generations = 0 if improved else progress.stale_generations + 1
    on_generation(progress, engine)
    return len(evaluations) == asked


def _overlapped(engine: Engine, evaluate: Overlapping[Any], budget: Budget,
                on_generation: OnGeneration, progress: Progress) -> Progress:
    """run_search with each batch asked for, and compiling, before the one
    before it is measured (see there)."""
    batch = engine.ask(_room(engine, budget, progress.evaluations)) \
        if _within(progress, budget, 0) else []
    started = evaluate.start(batch) if batch else None
    while started is not None:
        following = []
        if _within(progress, budget, len(batch)) and progress.generation + 1 < budget.generations:
            engine.learn(evaluate.refused(started))   # compiles it failed
            following = engine.ask(_room(engine, budget, progress.evaluations + len(batch)))
        ahead = evaluate.start(following) if following else None
        complete = _told(engine, progress, len(batch), evaluate.finish(started, 0, len(batch)),
                         on_generation)
        if not complete or budget.deadline.search_left() <= 0 or not budget.patient(progress):
            break  # the batch compiling ahead is dropped, never measured
        batch, started = following, ahead
    return progress


def random_search(space: SearchSpace, evaluate: Evaluate, evaluations: int,
                  rng: np.random.Generator, batch: int = 12) -> list[Evaluation]:
    """The reference a GA must beat: uniform samples, never the same twice."""
    seen: dict[Genome, Evaluation] = {}
    tries = 0
    while len(seen) < min(evaluations, space.size) and tries < 100 * evaluations:
        wanted: list[Genome] = []
        while len(wanted) < min(batch, evaluations - len(seen)) and tries < 100 * evaluations:
            tries += 1
            genome = sample(space, rng)
            if genome not in seen and genome not in wanted and space.allows(genome):
                wanted.append(genome)
        for evaluation in evaluate(wanted):
            seen[evaluation.genome] = evaluation
    return list(seen.values())
