"""Model-guided proposals: a surrogate learned from the evaluations so far
proposes a share of each batch (engine.evolve), so that the candidates
measured are the likeliest to be good.

The model is Parzen densities over each dimension's choices, as the
Tree-structured Parzen Estimator has them (Bergstra et al., NeurIPS 2011):
the evaluations told so far are ranked (`ranked`: constrained
non-domination, so several objectives and constraints need nothing else),
the best `Guide.good` of the feasible ones make the density l, the rest the
density g. A proposal is the best by l/g (summed over the dimensions in
logs) of `Guide.candidates` points drawn from l. A dimension of numbers
counts a told value for its neighbours too (a kernel over the choices'
order, `Guide.bandwidth` steps wide); any other counts it for itself alone.
Each density starts from a uniform prior worth `PRIOR` evaluations, so a
choice never told is neither ruled out nor preferred.

Feasibility is learned too: the failures (a refused launch or compile, a
wrong answer, a violated constraint) against the rest make a naive Bayes
classifier, and a proposal's log-probability of being feasible is added to
its score, so that regions that fail are avoided before anything there is
measured. The rules of engine.evolve's `avoid` forbid for certain; this
only ranks.

Warm starts: groups of evaluations of another context (the same unit on
another GPU or toolkit) are ranked on their own and count in the densities
at `Guide.warm` each, less as this search tells as many of its own.

A batch costs table look-ups per dimension and candidate (numpy):
milliseconds, whatever the space's size.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from nvcc_evo.engine.fronts import Evaluation
from nvcc_evo.engine.space import Dimension, Genome, SearchSpace

PRIOR = 1.0             # evaluations' worth of a uniform prior in each density
FEASIBILITY = 1.0       # the weight of the feasibility classifier's log-probability in a score


@dataclass(frozen=True)
class Guide:
    """How the surrogate guides a search (engine.evolve.Engine's `guide`; None: it does not). The
    defaults were chosen by leave-one-kernel-out on brute-forced spaces (BENCHMARKS.md)."""

    share: float = 0.5        # of each batch the surrogate proposes (the operators the rest)
    candidates: int = 24      # points drawn from the good density per proposal, the best by l/g
                              # taken
    good: float = 0.2         # the share of the told evaluations that makes the good density
    bandwidth: float = 2.0    # a numeric dimension's kernel, in steps of its choices
    after: int = 10           # evaluations told (warm starts counted at their worth) before it
                              # proposes
    warm: float = 0.5         # what one warm-start evaluation counts for, against one of this
                              # search


class Surrogate:
    """The densities of one space; `fit` with ranked evaluations, then `scores` of proposals."""

    def __init__(self, space: SearchSpace, guide: Guide = Guide()) -> None:
        self.dimensions, self.guide = space.dimensions, guide
        self.index = [{value: i for i, value in enumerate(d.choices)} for d in space.dimensions]
        self.kernels = [self._kernel(d, guide.bandwidth) for d in space.dimensions]
        self.known: dict[Genome, int] = {}          # a genome's row of `matrix`
        self.matrix = np.zeros((64, len(space.dimensions)), dtype=int)
        self.table: list[np.ndarray] = []        # per dimension: each choice's log l/g
        self.good: list[np.ndarray] = []         # per dimension: the good density l
        self.failing = False                     # some told evaluation failed: the classifier below
                                                 # is fitted
        self.passes: list[np.ndarray] = []       # per dimension: each choice's log density among
                                                 # the feasible
        self.fails: list[np.ndarray] = []        # ... among the failures
        self.counts = (0.0, 0.0)                 # log of the feasible and the failed evaluations'
                                                 # weight

    @staticmethod
    def _kernel(dimension: Dimension, bandwidth: float) -> np.ndarray:
        """How much a told choice (row) counts for each choice (column)."""
        size = len(dimension.choices)
        if not dimension.numeric:
            return np.eye(size)
        steps = np.arange(size)
        return np.exp(-0.5 * ((steps[:, None] - steps[None, :]) / bandwidth) ** 2)

    def rows(self, genomes: Sequence[Genome]) -> np.ndarray:
        """Each genome's choice indices (-1: a value outside its dimension), each genome's worked
        out once."""
        for g in genomes:
            if g not in self.known:
                if len(self.known) == len(self.matrix):
                    self.matrix = np.concatenate([self.matrix, np.zeros_like(self.matrix)])
                self.matrix[len(self.known)] = [self.index[d].get(v, -1)
                                                for d, (_, v) in enumerate(g.items)]
                self.known[g] = len(self.known)
        return self.matrix[[self.known[g] for g in genomes]]

    def _density(self, rows: np.ndarray, weights: np.ndarray, d: int) -> np.ndarray:
        kernel = self.kernels[d]
        counts = np.full(kernel.shape[0], PRIOR / kernel.shape[0])
        known = rows[:, d] >= 0
        if known.any():
            counts = counts + (weights[known, None] * kernel[rows[known, d]]).sum(axis=0)
        return counts / counts.sum()

    def fit(self, groups: Sequence[tuple[Sequence[Genome], Sequence[bool], float]]) -> None:
        """Learn from groups of genomes, each ranked best first with their feasibility and what one
        of them counts for: this search's, and warm starts' (ranked apart: another GPU's times are
        not this one's)."""
        rows, good, ok, weight = [], [], [], []
        for genomes, feasible, worth in groups:
            flags = np.asarray(feasible, dtype=bool)
            best = np.zeros(len(genomes), dtype=bool)
            best[: max(1, math.ceil(self.guide.good * flags.sum()))] = True
            rows.append(self.rows(genomes))
            good.append(best & flags if flags.any() else best)
            ok.append(flags)
            weight.append(np.full(len(genomes), worth))
        self.learn(np.concatenate(rows), np.concatenate(good), np.concatenate(ok),
                   np.concatenate(weight))

    def learn(self, rows: np.ndarray, good: np.ndarray, ok: np.ndarray, weight: np.ndarray) -> None:
        dims = range(len(self.dimensions))
        self.good = [self._density(rows[good], weight[good], d) for d in dims]
        self.table = [np.log(self.good[d]) - np.log(self._density(rows[~good], weight[~good], d))
                      for d in dims]
        self.failing = bool((~ok).any())
        if self.failing:           # a naive Bayes classifier of feasibility
            self.passes = [np.log(self._density(rows[ok], weight[ok], d)) for d in dims]
            self.fails = [np.log(self._density(rows[~ok], weight[~ok], d)) for d in dims]
            self.counts = (math.log(max(float(weight[ok].sum()), PRIOR)),
                           math.log(float(weight[~ok].sum())))

    def draw(self, rng: np.random.Generator, count: int) -> list[Genome]:
        """`count` points drawn from the good density, each dimension on its own (TPE's
        proposals)."""
        picks = [rng.choice(len(density), size=count, p=density) for density in self.good]
        return [Genome(tuple((d.knob, d.choices[int(pick[i])])
                             for d, pick in zip(self.dimensions, picks)))
                for i in range(count)]

    def _sum(self, tables: list[np.ndarray], rows: np.ndarray) -> np.ndarray:
        total = np.zeros(len(rows))
        for d, table in enumerate(tables):
            known = rows[:, d] >= 0
            total[known] += table[rows[known, d]]
        return total

    def scores(self, genomes: Sequence[Genome]) -> np.ndarray:
        """Each genome's score (higher: likelier good); 0 for all before `fit`."""
        if not self.table or not genomes:
            return np.zeros(len(genomes))
        rows = self.rows(genomes)
        total = self._sum(self.table, rows)
        if self.failing:
            passing = self.counts[0] + self._sum(self.passes, rows)
            failing = self.counts[1] + self._sum(self.fails, rows)
            total += FEASIBILITY * (passing - np.logaddexp(passing, failing))
        return total


Group = tuple[list[Genome], list[bool], float]


def ranked(evaluations: Sequence[Evaluation], weight: float) -> Group:
    """The evaluations best first, as constrained domination ranks them: the feasible by how many
    others dominate each (one objective: by its value), then the sum of their objectives scaled to
    the front's spread; the infeasible after them by violation. With their feasibility, and what
    each counts for."""
    feasible = [e for e in evaluations if e.feasible]
    failed = sorted((e for e in evaluations if not e.feasible), key=lambda e: e.violation)
    if feasible:
        objectives = np.array([e.objectives for e in feasible], dtype=float)
        spread = np.ptp(objectives, axis=0)
        scaled = (objectives - objectives.min(axis=0)) / np.where(spread > 0, spread, 1.0)
        if objectives.shape[1] == 1:
            order = np.argsort(objectives[:, 0], kind="stable")
        else:
            at_most = (objectives[:, None, :] <= objectives[None, :, :]).all(axis=2)
            better = (objectives[:, None, :] < objectives[None, :, :]).any(axis=2)
            dominated = (at_most & better).sum(axis=0)
            order = np.lexsort((scaled.sum(axis=1), dominated))
        feasible = [feasible[i] for i in order]
    feasibility = [True] * len(feasible) + [False] * len(failed)
    return [e.genome for e in feasible + failed], feasibility, weight
