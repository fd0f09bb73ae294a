"""Bayesian proposals (issue 40): a Gaussian process learned from the evaluations so far proposes a
share of each batch by Expected Improvement (engine.bayes), so a search reaches the best point in
fewer measurements than the operators alone. Known problems with known optima, no GPU."""
from __future__ import annotations

import numpy as np

from nvcc_evo.engine.bayes import (Bayes, BayesProposer, Encoding, GaussianProcess,
                                   expected_improvement, neighbours, targets)
from nvcc_evo.engine.evolve import Engine, Evaluation
from nvcc_evo.engine.space import Dimension, Genome, SearchSpace

# Point-in-polygon's shape (the benchmark hub's kt_pnpoly): a knob of 31 numbers, one of 11 whose
# best is its last choice, two of a few choices; 4092 points.
SPACE = SearchSpace((Dimension("define.METHOD", (0, 1, 2, 3), 0),
                     Dimension("define.BLOCK", tuple(range(32, 1024, 32)), 32),
                     Dimension("define.TILE", (1, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20), 1),
                     Dimension("define.USE", ("a", "b", "c"), "a")))
SEEDS = range(10)


def _time(genome: Genome) -> float:
    """A smooth landscape with its one optimum (1.0) at the edge of TILE: METHOD 1, BLOCK 128,
    TILE 20, USE b."""
    method, block, tile, use = (v for _, v in genome.items)
    return (1.0 + 0.3 * abs(method - 1) + ((block - 128) / 256) ** 2 + 0.08 * (20 - tile)
            + 0.2 * (use != "b"))


def _to_best(bayes: Bayes | None, seed: int) -> int:
    """Measurements until the optimum was measured."""
    engine = Engine(SPACE, np.random.default_rng(seed), bayes=bayes)
    measured = 0
    while measured < 1500:
        told = [Evaluation(g, (_time(g),)) for g in engine.ask()]
        for evaluation in told:
            measured += 1
            if evaluation.objectives[0] == 1.0:
                return measured
        engine.tell(told)
    return measured


def test_a_bayes_guided_search_measures_fewer_candidates_to_the_best_point():
    blind = np.mean([_to_best(None, seed) for seed in SEEDS])
    guided = np.mean([_to_best(Bayes(), seed) for seed in SEEDS])
    assert guided < 0.7 * blind, (guided, blind)          # 41 against 74 when written


def test_same_seed_same_proposals():
    def asked(seed: int) -> list[list[Genome]]:
        engine = Engine(SPACE, np.random.default_rng(seed), bayes=Bayes())
        batches = []
        for _ in range(5):
            batches.append(engine.ask())
            engine.tell([Evaluation(g, (_time(g),)) for g in batches[-1]])
        return batches
    assert asked(3) == asked(3)
    assert asked(3) != asked(4)


def test_it_proposes_only_after_two_generations_and_only_fresh_points():
    proposer = BayesProposer(SPACE, Bayes(share=1.0))
    rng = np.random.default_rng(0)
    told = [Evaluation(g, (_time(g),)) for g in {SPACE.genome({"define.BLOCK": b, "define.TILE": t})
                                                 for b in (32, 64, 96, 128, 160) for t in (1, 2, 4, 6, 8)}]
    assert proposer.propose(told[:23], 12, rng, lambda g: True) == []
    seen = {e.genome for e in told}
    taken = proposer.propose(told, 12, rng, lambda g: g not in seen)
    assert len(taken) == len(set(taken)) == 12 and not seen & set(taken)
    assert proposer.proposed == 12


def test_the_encoding_orders_numbers_and_spreads_the_rest():
    encoding = Encoding(SPACE)
    assert encoding.width == 1 + 1 + 1 + 3
    row = encoding.rows([SPACE.genome({"define.METHOD": 3, "define.TILE": 20, "define.USE": "c"})])[0]
    assert row[0] == 1.0 and row[1] == 0.0 and row[2] == 1.0
    assert list(row[3:]) == [0.0, 0.0, np.sqrt(0.5)]


def test_the_model_fits_what_it_is_told_and_is_unsure_far_from_it():
    rng = np.random.default_rng(1)
    x = rng.random((30, 2))
    y = np.sin(3 * x[:, 0]) + x[:, 1]
    y = (y - y.mean()) / y.std()
    model = GaussianProcess(2, 1e-4)
    model.tune(x, y)
    model.condition(x, y)
    mean, variance, _ = model.predict(np.vstack([x[:5], [[3.0, 3.0]]]))
    assert np.allclose(mean[:5], y[:5], atol=0.05)
    assert variance[-1] > 10 * variance[:5].max()


def test_expected_improvement_prefers_lower_means_and_more_doubt():
    gain = expected_improvement(np.array([0.0, -1.0, 0.0]), np.array([0.5, 0.5, 1.0]), 0.0)
    assert gain[1] > gain[0] and gain[2] > gain[0]


def test_failures_count_as_the_worst_told_and_several_objectives_by_rank():
    a, b, c = (SPACE.genome({"define.BLOCK": block}) for block in (32, 64, 96))
    one = targets([Evaluation(a, (2.0,)), Evaluation(b, (8.0,)),
                   Evaluation(c, (float("inf"),), float("inf"), "launch-refused")])
    assert np.allclose(one, np.log([2.0, 8.0, 8.0]))
    failed = Evaluation(a, (float("inf"),), float("inf"), "wrong-answer")
    assert list(targets([failed])) == [0.0]
    two = targets([Evaluation(a, (1.0, 1.0)), Evaluation(b, (2.0, 2.0)), Evaluation(c, (0.5, 3.0))])
    assert two[0] < two[1] and two[2] < two[1]


def test_neighbours_step_numbers_one_choice_and_the_rest_to_any():
    genome = SPACE.genome({"define.METHOD": 0, "define.BLOCK": 64, "define.TILE": 20})
    found = {str(g) for g in neighbours(genome, SPACE)}
    assert len(found) == 1 + 2 + 1 + 2
    assert "define.METHOD=1 define.BLOCK=64 define.TILE=20 define.USE=a" in found


def test_warm_starts_guide_the_model_sooner_and_toward_their_good_region():
    """Another GPU's measurements of the same unit (three times slower, the same shape): with 12 told
    here, too few alone, the model proposes at once, and its proposals are among the best tenth of the
    space; each group is standardised on its own, so the other GPU's scale does not matter."""
    from nvcc_evo.engine.space import sample
    rng = np.random.default_rng(0)
    drawn = list(dict.fromkeys(sample(SPACE, rng) for _ in range(400)))
    told = [Evaluation(g, (_time(g),)) for g in drawn[:12]]
    known = [[Evaluation(g, (3.0 * _time(g),)) for g in drawn[12:112]]]
    seen = {g for g in drawn[:112]}
    proposer = BayesProposer(SPACE, Bayes(share=1.0))
    assert proposer.propose(told, 12, rng, lambda g: g not in seen) == []         # cold: 12 of 24
    taken = proposer.propose(told, 12, rng, lambda g: g not in seen, known)
    assert len(taken) == 12 and not seen & set(taken)
    tenth = np.quantile([_time(g) for g in drawn], 0.1)
    assert np.median([_time(g) for g in taken]) < tenth, (sorted(_time(g) for g in taken), tenth)


def test_failures_and_two_objectives_keep_it_proposing():
    """A search whose every other point fails, with two objectives: the model learns, proposes."""
    engine = Engine(SPACE, np.random.default_rng(5), bayes=Bayes(share=1.0))
    for _ in range(4):
        told = []
        for genome in engine.ask():
            if genome.value("define.TILE") in (1, 4, 8, 12, 16, 20):
                told.append(Evaluation(genome, (float("inf"),) * 2, float("inf"), "launch-refused"))
            else:
                told.append(Evaluation(genome, (_time(genome), float(genome.value("define.BLOCK")))))
        engine.tell(told)
    assert engine.bayes is not None and engine.bayes.proposed == 24


def test_numbers_declared_unordered_are_categories_to_the_model_and_to_a_local_step(tmp_path):
    """`define.METHOD in {0, 1, 2, 3} unordered` (the ACF, parsed): the model gives it a column
    per choice, its one-knob neighbours are every other choice, and a local step reaches
    METHOD=3 from 0 in one move, which steps along the numbers' order never do."""
    from nvcc_evo.acf.parse import parse_text
    from nvcc_evo.engine.space import build_space, step
    text = ('acf 1\nunit "p.cu" {\n    search {\n        define.METHOD in {0, 1, 2, 3} unordered\n'
            '        define.TILE in {1, 2, 4, 6}\n    }\n}\n')
    source = tmp_path / "p.cu"
    source.write_text("#define METHOD 0\n#define TILE 1\n__global__ void p() {}\n")
    space = build_space(parse_text(text, "nvcc-evo.acf").units[0], source)
    ordered = build_space(parse_text(text.replace(" unordered", ""), "nvcc-evo.acf").units[0], source)
    assert [d.unordered for d in space.dimensions] == [True, False] and "unordered" in str(space.dimensions[0])
    assert Encoding(space).width == 4 + 1 and Encoding(ordered).width == 1 + 1
    start = space.genome({"define.METHOD": 0, "define.TILE": 1})
    assert {g.value("define.METHOD") for g in neighbours(start, space)} == {0, 1, 2, 3}
    assert {g.value("define.METHOD") for g in neighbours(start, ordered)} == {0, 1}
    rng = np.random.default_rng(0)
    assert {step(start, space, rng).value("define.METHOD") for _ in range(200)} == {0, 1, 2, 3}
    assert {step(start, ordered, rng).value("define.METHOD") for _ in range(200)} == {0, 1}
