"""Stagnation restarts, it does not stop (issue 26, point 2): with no
patience given, a search whose generations stop improving diversifies
(random immigrants, jumps from the front) until its budget ends, or until
the space is searched whole; the seed still reproduces the run."""
from __future__ import annotations

import numpy as np

from nvcc_evo.engine.evolve import Budget, Engine, Evaluation, run_search
from nvcc_evo.engine.space import Dimension, SearchSpace

SPACE = SearchSpace(tuple(Dimension(f"define.K{i}", tuple(range(6)), 0) for i in range(4)))   # 1296 points


def _plateau(asked: list):
    """A landscape that stops rewarding after a few steps: every point
    scores by its first knob alone, so most generations find nothing new."""
    def evaluate(genomes):
        asked.extend(genomes)
        return [Evaluation(g, (float(-min(g.items[0][1], 2)),)) for g in genomes]
    return evaluate


def _run(seed: int, budget: Budget, space: SearchSpace = SPACE):
    asked: list = []
    engine = Engine(space, np.random.default_rng(seed), population=8, seeds=[space.baseline()])
    progress = run_search(engine, _plateau(asked), budget)
    return engine, progress, asked


def test_a_stagnant_search_goes_on_to_its_budget_diversifying():
    engine, progress, asked = _run(4, Budget(evaluations=200))
    assert progress.evaluations == 200 and len(set(asked)) == 200     # it did not stop at a patience
    assert progress.stale_generations > 4                              # long stagnant, still searching
    assert engine.diversified > 20                                     # immigrants and jumps made
    # the immigrants reach far from the front: points that move three knobs or more from every front point
    front = [e.genome for e in engine.front()]
    far = [g for g in asked if all(sum(a != b for a, b in zip(g.items, f.items)) >= 3 for f in front)]
    assert len(far) > 10


def test_patience_given_still_stops_the_search():
    _, progress, _ = _run(4, Budget(evaluations=200, patience=3))
    assert progress.evaluations < 200 and progress.stale_generations == 3


def test_the_same_seed_reproduces_the_run_through_its_restarts():
    first, second, other = (_run(seed, Budget(evaluations=150))[2] for seed in (7, 7, 8))
    assert first == second
    assert first != other


def test_a_small_space_is_searched_whole_and_then_the_search_ends():
    small = SearchSpace(tuple(Dimension(f"define.K{i}", tuple(range(3)), 0) for i in range(3)))   # 27 points
    engine, progress, asked = _run(1, Budget(evaluations=10_000), small)
    assert len(set(asked)) == 27 == len(asked) and progress.evaluations == 27
