"""Bayesian proposals: a Gaussian process learned from the evaluations so far
proposes a share of each batch (engine.evolve's `bayes`), the candidates of
a pool with the most Expected Improvement.

The model: a Gaussian process with a Matern-5/2 kernel, one length-scale per
input (fitted by marginal likelihood every `Bayes.retune` fits, kept in
between), on the choices' order scaled to [0, 1] (a dimension of numbers, or
of two choices) or one-hot (any other); the target is the objective's
logarithm (one objective; several: the constrained-domination rank), each
failure counted as the worst value told, standardised. The training set is
capped (`Bayes.cap`: the best half and a random draw of the rest), so a fit
costs milliseconds whatever the budget.

The pool: `Bayes.pool` random points, every one-knob neighbour of the best
`Bayes.near` told and `Bayes.jumps` mutations of each, all fresh (the
engine's `fresh`). A batch is taken one point at a time by Expected
Improvement, each taken point told to the model as its predicted mean (the
kriging believer), so that the next is drawn away from it where the model is
unsure.

Warm starts (engine.evolve's `warm`: the same unit on another GPU or
toolkit, a similar unit): each group's targets are standardised on their
own (another GPU's times are not this one's; their shape is what carries)
and join the training set with more noise (`WARM_NOISE`), so this search's
own measurements outweigh them where both are; they count half toward
`Bayes.after`, so a warm search is guided sooner.

On the benchmark hub's 16 brute-forced spaces (BENCHMARKS.md) half of each
batch so proposed read 0.706 against the operators' 0.578 (seeds 100-119).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np
from scipy.linalg import cho_factor, cho_solve, solve_triangular
from scipy.optimize import minimize
from scipy.special import ndtr

from nvcc_evo.engine.fronts import Evaluation
from nvcc_evo.engine.space import Genome, SearchSpace, mutate, repair, sample
from nvcc_evo.engine.surrogate import ranked

SQRT5 = math.sqrt(5.0)
LENGTH = 0.5                        # the length-scales' prior centre (inputs span [0, 1])
LENGTHS = (0.03, 5.0)               # the length-scales' bounds
PRIOR_WEIGHT = 0.05                 # the weight of the length-scales' log-normal prior
TUNE_STEPS = 20                     # L-BFGS-B iterations of a length-scale fit
JUMP_RATE = 0.3                     # of the pool's mutations from the best
WARM_NOISE = 0.25                   # a warm start's noise, of its standardised target
WARM_WORTH = 0.5                    # what a warm start's evaluation counts toward `Bayes.after`


@dataclass(frozen=True)
class Bayes:
    """How the Gaussian process proposes (engine.evolve.Engine's `bayes`; None: it does not)."""

    share: float = 0.5        # of each batch it proposes (a fraction drawn as a chance)
    after: int = 24           # evaluations told before it proposes (two generations)
    pool: int = 400           # random points in each batch's pool of candidates
    near: int = 5             # the best told, whose neighbours and mutations join the pool
    jumps: int = 10           # mutations of each of those
    cap: int = 200            # evaluations the model is fitted on, at most
    retune: int = 5           # fits between two fits of the length-scales
    noise: float = 1e-3       # of the standardised target


class Encoding:
    """A genome as a row of numbers: each ordered dimension its choice's place in [0, 1], any
    other one column per choice; a dimension of one choice none."""

    def __init__(self, space: SearchSpace) -> None:
        self.index = [{value: i for i, value in enumerate(d.choices)} for d in space.dimensions]
        self.columns: list[tuple[int, int, bool]] = []     # (dimension, first column, ordered)
        self.width = 0
        for i, d in enumerate(space.dimensions):
            size = len(d.choices)
            if size < 2:
                continue
            ordered = size == 2 or d.numeric
            self.columns.append((i, self.width, ordered))
            self.width += 1 if ordered else size

    def rows(self, genomes: Sequence[Genome]) -> np.ndarray:
        x = np.zeros((len(genomes), self.width))
        for r, genome in enumerate(genomes):
            for i, column, ordered in self.columns:
                at = self.index[i].get(genome.items[i][1], 0)
                if ordered:
                    x[r, column] = at / (len(self.index[i]) - 1)
                else:
                    x[r, column + at] = math.sqrt(0.5)      # two one-hot rows one unit apart
        return x


def matern(a: np.ndarray, b: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """The Matern-5/2 kernel between the rows of `a` and of `b` (unit variance)."""
    a, b = a / lengths, b / lengths
    squared = np.maximum((a * a).sum(1)[:, None] + (b * b).sum(1)[None, :] - 2 * a @ b.T, 0.0)
    r = np.sqrt(squared)
    result: np.ndarray = (1 + SQRT5 * r + 5.0 / 3.0 * squared) * np.exp(-SQRT5 * r)
    return result


class GaussianProcess:
    """A zero-mean Gaussian process on a standardised target, its length-scales by marginal
    likelihood (with a weak log-normal prior, so a few points do not send them to a bound)."""

    def __init__(self, width: int, noise: float) -> None:
        self.lengths = np.full(width, LENGTH)
        self.noise = noise
        self.x = np.zeros((0, width))
        self.factor = np.zeros((0, 0))
        self.alpha = np.zeros(0)

    def _covariance(self, x: np.ndarray, lengths: np.ndarray, extra: np.ndarray) -> np.ndarray:
        """The kernel's matrix of `x`, each point's noise on the diagonal (`extra` beside the
        model's own: a warm start's)."""
        return matern(x, x, lengths) + np.diag(self.noise + extra)

    def _cost(self, logs: np.ndarray, x: np.ndarray, y: np.ndarray, extra: np.ndarray) -> float:
        """The negative log marginal likelihood and the prior, at length-scales exp(`logs`)."""
        try:
            lower = np.linalg.cholesky(self._covariance(x, np.exp(logs), extra))
        except np.linalg.LinAlgError:
            return 1e10
        alpha = solve_triangular(lower, y, lower=True)
        prior = PRIOR_WEIGHT * float(((logs - math.log(LENGTH)) ** 2).sum())
        return float(0.5 * alpha @ alpha + np.log(np.diag(lower)).sum()) + prior

    def tune(self, x: np.ndarray, y: np.ndarray, extra: np.ndarray | None = None) -> None:
        bounds = [tuple(map(math.log, LENGTHS))] * x.shape[1]
        extra = np.zeros(len(x)) if extra is None else extra
        found = minimize(self._cost, np.log(self.lengths), args=(x, y, extra), method="L-BFGS-B",
                         bounds=bounds, options={"maxiter": TUNE_STEPS})
        self.lengths = np.exp(found.x)

    def condition(self, x: np.ndarray, y: np.ndarray, extra: np.ndarray | None = None) -> None:
        self.x = x
        extra = np.zeros(len(x)) if extra is None else extra
        self.factor = cho_factor(self._covariance(x, self.lengths, extra), lower=True)[0]
        self.alpha = cho_solve((self.factor, True), y)

    def predict(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The mean and variance at each row of `x`, and the whitened cross-covariance (for
        updating the variances as points are taken)."""
        cross = matern(x, self.x, self.lengths)
        whitened = solve_triangular(self.factor, cross.T, lower=True)
        variance = np.maximum(1.0 - (whitened * whitened).sum(0), 1e-12)
        return cross @ self.alpha, variance, whitened


def expected_improvement(mean: np.ndarray, deviation: np.ndarray, best: float) -> np.ndarray:
    """How far below `best` each prediction is expected to fall (a target minimised)."""
    z = (best - mean) / deviation
    result: np.ndarray = deviation * (z * ndtr(z) + np.exp(-0.5 * z * z) / math.sqrt(2 * math.pi))
    return result


def targets(evaluations: Sequence[Evaluation]) -> np.ndarray:
    """What the model learns of each evaluation, lower better: the objective's logarithm (one
    objective, all positive), the objective (one), or the place in constrained domination's
    ranking (several); a failure the worst value of those that did not fail."""
    feasible = np.array([e.feasible for e in evaluations])
    y = np.zeros(len(evaluations))
    if len(evaluations[0].objectives) == 1:
        values = np.array([e.objectives[0] for e in evaluations], dtype=float)
        positive = bool((values[feasible] > 0).all())
        y[feasible] = np.log(values[feasible]) if positive else values[feasible]
    else:
        order, _, _ = ranked(evaluations, 1.0)
        place = {genome: i for i, genome in enumerate(order)}
        y = np.array([place[e.genome] / len(order) for e in evaluations])
    y[~feasible] = y[feasible].max() if feasible.any() else 0.0
    return y


def neighbours(genome: Genome, space: SearchSpace) -> list[Genome]:
    """Every genome one knob away: the next choice either side (numbers), any other choice
    (the rest)."""
    found = []
    for i, d in enumerate(space.dimensions):
        if len(d.choices) < 2:
            continue
        at = d.choices.index(genome.items[i][1])
        others = (at - 1, at + 1) if d.numeric else range(len(d.choices))
        for j in others:
            if 0 <= j < len(d.choices) and j != at:
                items = list(genome.items)
                items[i] = (items[i][0], d.choices[j])
                found.append(repair(Genome(tuple(items)), space))
    return found


class BayesProposer:
    """The Gaussian process of one search: `propose` fits it to the evaluations told and takes
    the candidates of most Expected Improvement."""

    def __init__(self, space: SearchSpace, settings: Bayes = Bayes()) -> None:
        self.space, self.settings = space, settings
        self.encoding = Encoding(space)
        self.model = GaussianProcess(self.encoding.width, settings.noise)
        self.fits = 0
        self.proposed = 0                  # proposals made (progress)

    def propose(self, told: Sequence[Evaluation], wanted: int, rng: np.random.Generator,
                fresh: Callable[[Genome], bool],
                known: Sequence[Sequence[Evaluation]] = ()) -> list[Genome]:
        """The model's share of `wanted` fresh genomes (none before `Bayes.after` are told, the
        warm starts `known` counting WARM_WORTH each, or where nothing told is feasible or the
        space has no dimension of two choices)."""
        warm = [group for group in known if any(e.feasible for e in group)]
        worth = len(told) + WARM_WORTH * sum(map(len, warm))
        usable = worth >= self.settings.after and any(e.feasible for e in told)
        if not usable or self.encoding.width == 0:
            return []               # (no draw: the operators' random stream is theirs until then)
        share = min(wanted, int(self.settings.share * wanted + rng.random()))
        if share <= 0:
            return []
        best = self._fit(told, rng, warm)
        pool = self._pool(told, rng, fresh)
        taken = self._take(pool, share, best) if pool else []
        self.proposed += len(taken)
        return taken

    def _training(self, told: Sequence[Evaluation], rng: np.random.Generator) -> list[Evaluation]:
        """At most `Bayes.cap`: the best half of that and a random draw of the rest."""
        cap = self.settings.cap
        if len(told) <= cap:
            return list(told)
        order = np.argsort(targets(told), kind="stable")
        rest = order[cap // 2:]
        drawn = rng.choice(len(rest), size=cap - cap // 2, replace=False)
        return [told[i] for i in order[:cap // 2]] + [told[rest[i]] for i in sorted(drawn)]

    def _fit(self, told: Sequence[Evaluation], rng: np.random.Generator,
             warm: Sequence[Sequence[Evaluation]] = ()) -> float:
        """Fit to the training set and the warm starts (each group standardised on its own,
        noisier); the best standardised target this search told."""
        rows, values, extra = [], [], []
        for group, noise in [(told, 0.0)] + [(g, WARM_NOISE) for g in warm]:
            training = self._training(group, rng)
            y = targets(training)
            rows.append(self.encoding.rows([e.genome for e in training]))
            values.append((y - y.mean()) / (y.std() or 1.0))
            extra.append(np.full(len(training), noise))
        x, y, noisy = np.vstack(rows), np.concatenate(values), np.concatenate(extra)
        if self.fits % self.settings.retune == 0:
            self.model.tune(x, y, noisy)
        self.fits += 1
        self.model.condition(x, y, noisy)
        return float(values[0].min())

    def _pool(self, told: Sequence[Evaluation], rng: np.random.Generator,
              fresh: Callable[[Genome], bool]) -> list[Genome]:
        """Random points, and the neighbours and mutations of the best told: the fresh ones."""
        drawn = [sample(self.space, rng) for _ in range(self.settings.pool)]
        order = np.argsort(targets(told), kind="stable")[:self.settings.near]
        best = [told[i].genome for i in order if told[i].feasible]
        for genome in best:
            drawn += neighbours(genome, self.space)
        for genome in best:
            drawn += [mutate(genome, self.space, rng, rate=JUMP_RATE)
                      for _ in range(self.settings.jumps)]
        return [g for g in dict.fromkeys(drawn) if fresh(g)]

    def _take(self, pool: list[Genome], count: int, best: float) -> list[Genome]:
        """`count` of the pool by Expected Improvement, one at a time, each taken point told to
        the model as its mean: the variances near it shrink (the kriging believer)."""
        x = self.encoding.rows(pool)
        mean, variance, whitened = self.model.predict(x)
        taken: list[int] = []
        for _ in range(min(count, len(pool))):
            gain = expected_improvement(mean, np.sqrt(variance), best)
            gain[taken] = -1.0
            i = int(np.argmax(gain))
            taken.append(i)
            shared = matern(x, x[i:i + 1], self.model.lengths)[:, 0] - whitened.T @ whitened[:, i]
            own = max(float(variance[i]) + self.model.noise, 1e-12)
            variance = np.maximum(variance - shared ** 2 / own, 1e-12)
            whitened = np.vstack([whitened, shared[None, :] / math.sqrt(own)])
        return [pool[i] for i in taken]
