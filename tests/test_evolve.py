"""The search engine on known problems, without a GPU or a compiler."""
from __future__ import annotations

import math

import numpy as np
import pytest

from nvcc_evo.engine.evolve import (Budget, Engine, Evaluation, dominates, hypervolume_2d, non_dominated_sort,
                             pareto_front, random_search, run_search)
from nvcc_evo.engine.space import Dimension, Genome, SearchSpace
from nvcc_evo.system.clock import Deadline

STEPS = 21   # each variable takes 21 values in [0, 1]


def zdt1_space(variables: int = 6) -> SearchSpace:
    return SearchSpace(tuple(Dimension(f"define.X{i}", tuple(range(STEPS)), 0) for i in range(variables)))


def zdt1(genome: Genome) -> tuple[float, float]:
    x = [v / (STEPS - 1) for _, v in genome.items]
    g = 1 + 9 * sum(x[1:]) / (len(x) - 1)
    f1 = x[0]
    return f1, g * (1 - math.sqrt(f1 / g))


def evaluate_zdt1(batch):
    return [Evaluation(g, zdt1(g)) for g in batch]


def best_hypervolume() -> float:
    # The true front (g = 1) sampled on the same grid.
    front = [(i / (STEPS - 1), 1 - math.sqrt(i / (STEPS - 1))) for i in range(STEPS)]
    return hypervolume_2d(front, (1.1, 1.1))


def run_zdt1(seed: int, evaluations: int = 1200):
    engine = Engine(zdt1_space(), np.random.default_rng(seed), population=40)
    run_search(engine, evaluate_zdt1, Budget(evaluations=evaluations, patience=1000))
    return engine.front()


def test_nsga2_reaches_the_zdt1_front():
    front = run_zdt1(seed=1)
    hv = hypervolume_2d([e.objectives for e in front], (1.1, 1.1))
    assert hv >= 0.9 * best_hypervolume(), (hv, best_hypervolume())
    assert len(front) >= 8


def test_same_seed_same_front_other_seed_other_path():
    first, again, other = run_zdt1(7, 400), run_zdt1(7, 400), run_zdt1(8, 400)
    assert [e.genome for e in first] == [e.genome for e in again]
    assert [e.genome for e in first] != [e.genome for e in other]


def test_nsga2_beats_random_search_at_equal_budget():
    ga = [hypervolume_2d([e.objectives for e in run_zdt1(s, 400)], (1.1, 1.1)) for s in range(5)]
    rnd = []
    for s in range(5):
        found = random_search(zdt1_space(), evaluate_zdt1, 400, np.random.default_rng(s))
        rnd.append(hypervolume_2d([e.objectives for e in pareto_front(found)], (1.1, 1.1)))
    assert np.median(ga) > np.median(rnd)


def test_single_objective_is_an_elitist_ga():
    space = SearchSpace(tuple(Dimension(f"define.A{i}", tuple(range(10)), 0) for i in range(5)))
    target = (3, 7, 1, 9, 4)

    def evaluate(batch):
        return [Evaluation(g, (sum((v - t) ** 2 for (_, v), t in zip(g.items, target)),)) for g in batch]

    engine = Engine(space, np.random.default_rng(0), population=20)
    progress = run_search(engine, evaluate, Budget(evaluations=2000, patience=30))
    (best,) = engine.front()
    assert best.objectives == (0,) and progress.evaluations < space.size


def test_constraints_prefer_feasible_points():
    space = SearchSpace((Dimension("define.A", tuple(range(20)), 0),))

    def evaluate(batch):   # minimise -A subject to A <= 12
        return [Evaluation(g, (-g.value("define.A"),), max(0, g.value("define.A") - 12)) for g in batch]

    engine = Engine(space, np.random.default_rng(3), population=6)
    run_search(engine, evaluate, Budget(evaluations=20, patience=10))
    (best,) = engine.front()
    assert best.genome.value("define.A") == 12


def test_failures_are_dominated_and_never_asked_again():
    space = SearchSpace((Dimension("define.A", tuple(range(6)), 0),))
    calls = []

    def evaluate(batch):
        calls.extend(batch)
        return [Evaluation(g, (math.inf,), status="compile-error") if g.value("define.A") % 2
                else Evaluation(g, (g.value("define.A"),)) for g in batch]

    engine = Engine(space, np.random.default_rng(0), population=4)
    run_search(engine, evaluate, Budget(evaluations=50, patience=50))
    assert len(calls) == len(set(calls)) == 6          # the whole space, each point once
    assert [e.genome.value("define.A") for e in engine.front()] == [0]


def test_seeds_come_first_and_history_is_not_asked_again():
    space = zdt1_space(2)
    seed = space.genome({"define.X0": 5, "define.X1": 5})
    done = Evaluation(space.baseline(), zdt1(space.baseline()))
    engine = Engine(space, np.random.default_rng(0), population=5, seeds=[seed, space.baseline()], history=[done])
    batch = engine.ask()
    assert batch[0] == seed and space.baseline() not in batch and len(set(batch)) == 5


def test_non_dominated_sort_and_domination():
    pop = [Evaluation(Genome((("a", i),)), objs) for i, objs in enumerate([(1, 4), (2, 2), (4, 1), (3, 3), (5, 5)])]
    assert non_dominated_sort(pop) == [[0, 1, 2], [3], [4]]
    infeasible = Evaluation(Genome((("a", 9),)), (0, 0), violation=1.0)
    assert dominates(pop[4], infeasible) and not dominates(infeasible, pop[4])


def test_hypervolume_of_a_known_front():
    assert hypervolume_2d([(0.0, 1.0), (1.0, 0.0)], (2.0, 2.0)) == pytest.approx(3.0)


def test_evaluations_made_before_count_toward_the_budget():
    """A resumed search reaches the budget; it does not spend it again."""
    asked = []

    def evaluate(batch):
        asked.extend(batch)
        return evaluate_zdt1(batch)

    engine = Engine(zdt1_space(), np.random.default_rng(0), population=8)
    progress = run_search(engine, evaluate, Budget(evaluations=20, patience=100), done=15)
    assert len(asked) == 5 and progress.evaluations == 20
    run_search(Engine(zdt1_space(), np.random.default_rng(0), population=8), evaluate,
               Budget(evaluations=20, patience=100), done=20)
    assert len(asked) == 5


class Pipelined:
    """An evaluate with start/finish that logs the order of its calls."""

    def __init__(self):
        self.log, self.measured = [], []

    def start(self, batch):
        self.log.append(("start", len(self.log)))
        return list(batch)

    def finish(self, started, begin, end):
        self.log.append(("finish", len(self.log)))
        self.measured += started[begin:end]
        return evaluate_zdt1(started[begin:end])

    def refused(self, started):
        return []                    # no compile fails


def test_overlap_compiles_the_next_batch_before_measuring_and_a_seed_reproduces_it():
    def run(seed):
        evaluate = Pipelined()
        engine = Engine(zdt1_space(), np.random.default_rng(seed), population=20)
        progress = run_search(engine, evaluate, Budget(evaluations=600, patience=1000), overlap=True)
        return evaluate, progress, engine.front()

    evaluate, progress, front = run(5)
    kinds = [kind for kind, _ in evaluate.log]
    # batch 2 starts compiling before batch 1 is measured, batch 3 before batch 2, ...
    assert kinds[:6] == ["start", "start", "finish", "start", "finish", "start"]
    assert progress.evaluations == len(evaluate.measured) == 600  # the budget exactly, none measured twice
    assert len(set(evaluate.measured)) == 600
    again, _, front_again = run(5)
    assert again.measured == evaluate.measured and front_again == front
    hv = hypervolume_2d([e.objectives for e in front], (1.1, 1.1))
    assert hv > 0.9 * best_hypervolume()            # as good as without overlap


class OutOfTime(Pipelined):
    """An evaluator whose time runs out after `measured` candidates: it measures no more (as
    execute.evaluate.Evaluator does once no candidate would end by its deadline), however often asked."""

    def __init__(self, measured: int):
        super().__init__()
        self.left, self.asked = measured, 0

    def __call__(self, batch):
        return self.finish(self.start(batch), 0, len(batch))

    def finish(self, started, begin, end):
        self.asked += 1
        taken = started[begin:end][:self.left]
        self.left -= len(taken)
        self.measured += taken
        return evaluate_zdt1(taken)


@pytest.mark.parametrize("overlap", [False, True])
def test_the_search_ends_when_the_evaluator_measures_fewer_than_asked(overlap):
    """Its time up, the evaluator returns fewer evaluations than the batch: the search ends there, not
    asking for batch after batch of nothing until its own clock says so (on the H200 softmax.cu's search
    told five empty generations in its last second, each breeding and compiling a batch ahead)."""
    evaluate = OutOfTime(measured=30)
    engine = Engine(zdt1_space(), np.random.default_rng(0), population=12)
    progress = run_search(engine, evaluate, Budget(evaluations=math.inf, patience=None,
                                                              deadline=Deadline.from_now(30)), overlap=overlap)
    assert progress.evaluations == 30 and progress.generation == 3 and evaluate.asked == 3


class Generations:
    """A search's deadline whose time is up once `generations` batches have been measured by `evaluate`:
    asked by the engine (system.clock.Deadline answers the same question of the clock)."""

    def __init__(self, evaluate: Pipelined, generations: int):
        self.evaluate, self.generations, self.asked = evaluate, generations, 0

    def search_left(self) -> float:
        self.asked += 1
        finished = sum(1 for kind, _ in self.evaluate.log if kind == "finish")
        return 0.0 if finished >= self.generations else math.inf


@pytest.mark.parametrize("overlap", [False, True])
def test_the_search_ends_when_its_deadline_says_no_time_is_left(overlap):
    """The engine asks the deadline, nothing else, whether time is left: once it says none, no batch is
    measured (with overlap, the batch compiling ahead is dropped); a deadline already past measures nothing."""
    evaluate = Pipelined()
    deadline = Generations(evaluate, 2)
    engine = Engine(zdt1_space(), np.random.default_rng(0), population=12)
    plain = (lambda batch: evaluate.finish(evaluate.start(batch), 0, len(batch))) if not overlap else evaluate
    progress = run_search(engine, plain, Budget(evaluations=math.inf, patience=None, deadline=deadline),
                          overlap=overlap)
    assert progress.generation == 2 and progress.evaluations == len(evaluate.measured) == 24 and deadline.asked
    assert [kind for kind, _ in evaluate.log].count("start") == (3 if overlap else 2)
    past = Deadline(origin=0.0, seconds=1.0)           # time.monotonic() 0 is long gone
    nothing = run_search(Engine(zdt1_space(), np.random.default_rng(0)), evaluate_zdt1,
                         Budget(evaluations=math.inf, deadline=past), overlap=False)
    assert nothing.evaluations == 0 and nothing.generation == 0
