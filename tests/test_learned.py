"""Learn what fails (issue 26, point 3): a launch the driver refuses (the
words of measure.occupancy.launch_problem, the real function) teaches the
engine a constraint over the defines of the bench's grid and block, and
genomes known to break it are not proposed again; the avoided count is kept."""
from __future__ import annotations

import numpy as np

from nvcc_evo.acf.bench.spec import plan_bench
from nvcc_evo.acf.parse import parse_text
from nvcc_evo.measure.occupancy import launch_problem
from nvcc_evo.engine.evolve import Budget, Engine, Evaluation, run_search
from nvcc_evo.engine.learned import LaunchLimits
from nvcc_evo.engine.space import Dimension, Genome, SearchSpace

BENCH = parse_text('''acf 1
unit "k.cu" {
    bench {
        kernel tiled
        let N = 4096
        arg n : i32 = N
        arg y : f32[N] = output
        grid (cdiv(N, BX * BY))
        block (BX, BY)
        shared BX * BY * 4 * STAGES
        check y rtol 1e-5
    }
}
''').units[0].bench
H200 = {"threads": 1024, "registers": 65536, "shared": 232448, "dims": (1024, 1024, 64)}
SPACE = SearchSpace((Dimension("define.BX", (8, 16, 32, 64, 128), 8), Dimension("define.BY", (1, 2, 4, 8, 16, 32), 1),
                     Dimension("define.STAGES", (1, 2, 3, 4), 1), Dimension("define.UNROLL", (1, 2, 4, 8), 1)))


def _defines(genome: Genome) -> dict:
    return {k.split(".", 1)[1]: v for k, v in genome.items}


def _registers(defines: dict) -> int:
    return 40 + 24 * defines["UNROLL"]          # 64..232 registers a thread


def _launch(genome: Genome) -> str:
    """What the measuring process says of this genome's launch (the real rule)."""
    defines = _defines(genome)
    plan = plan_bench(BENCH, defines)
    registers = _registers(defines)
    kernel = {"threads": min(1024, H200["registers"] // registers // 32 * 32), "registers": registers,
              "shared": 1024 * defines["STAGES"]}
    return launch_problem(plan.block, plan.shared, kernel, H200)


def _search(learn: bool, seed: int = 3):
    details: dict = {}
    asked: list = []
    limits = LaunchLimits(BENCH, _defines, lambda g: details.get(g, "")) if learn else None

    def evaluate(genomes):
        evaluations = []
        for g in genomes:
            asked.append((g, limits.threads if limits else None))   # what was known when it was proposed
            details[g] = _launch(g)
            speed = -float(_defines(g)["BX"] * _defines(g)["BY"])        # bigger blocks are better, to a point
            evaluations.append(Evaluation(g, (speed,)) if not details[g] else
                               Evaluation(g, (float("inf"),), float("inf"), "launch-refused"))
        return evaluations

    engine = Engine(SPACE, np.random.default_rng(seed), population=10, seeds=[SPACE.baseline()], avoid=limits)
    run_search(engine, evaluate, Budget(evaluations=150))
    refused = [g for g, said in details.items() if said]
    engine.asked = asked
    return engine, limits, refused


def test_the_refusal_texts_are_the_ones_learned():
    g = SPACE.genome({"define.BX": 128, "define.BY": 16})       # 2048 threads
    said = _launch(g)
    limits = LaunchLimits(BENCH, _defines, lambda genome: said)
    limits.learn(Evaluation(g, (float("inf"),), float("inf"), "launch-refused"))
    assert limits.threads == 2048 and limits.said == ["blocks of 2048 threads or more"]
    assert limits.forbids(SPACE.genome({"define.BX": 64, "define.BY": 32}))          # 2048 too
    assert limits.forbids(SPACE.genome({"define.BX": 128, "define.BY": 32}))         # 4096
    assert not limits.forbids(SPACE.genome({"define.BX": 64, "define.BY": 16}))      # 1024: fine


def test_registers_per_block_are_learned_for_those_defines_and_a_register_cap_lifts_them():
    g = SPACE.genome({"define.BX": 64, "define.BY": 16, "define.UNROLL": 8})          # 1024 threads, 232 registers
    said = _launch(g)
    assert "registers per thread" in said
    limits = LaunchLimits(BENCH, _defines, lambda genome: said)
    limits.learn(Evaluation(g, (float("inf"),), float("inf"), "launch-refused"))
    assert limits.forbids(g)
    capped = Genome(g.items + (("ptxas.maxrregcount", 64),))
    assert not limits.forbids(capped)                       # 64 registers fit 1024 threads
    assert not limits.forbids(SPACE.genome({"define.BX": 64, "define.BY": 16, "define.UNROLL": 1}))


def test_a_search_that_learns_proposes_fewer_refused_launches_and_none_it_knows_of():
    learned, blind, avoided = 0, 0, 0
    for seed in range(5):
        engine, limits, refused = _search(learn=True, seed=seed)
        learned, blind, avoided = learned + len(refused), blind + len(_search(learn=False, seed=seed)[2]), \
            avoided + len(engine.avoided)
        # what it learned holds: no point it measured fine is forbidden (no false constraint) ...
        assert all(not limits.forbids(g) or g in refused for g in engine.seen)
        # ... and once a thread limit was learned no block that large was proposed
        blocks = [(plan_bench(BENCH, _defines(g)).block, known) for g, known in engine.asked]
        assert all(block[0] * block[1] < known for block, known in blocks)
        assert limits.threads < float("inf")
    assert avoided > 50                                  # counted: the proposals it did not make
    assert learned < 0.8 * blind, (learned, blind)
