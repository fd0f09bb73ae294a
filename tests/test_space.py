"""Search spaces from units, and the seeded operators."""
from __future__ import annotations

import itertools
import subprocess

import numpy as np
import pytest

from conftest import DATA
from nvcc_evo.acf import model
from nvcc_evo.acf.parse import parse_text
from nvcc_evo.acf.sources import source_default, source_defines, unit_defines
from nvcc_evo.driver.cmdline.flags import flag_text
from nvcc_evo.engine.space import DEFAULT_SPACE, Genome, build_space, crossover, mutate, repair, sample, step

UNIT = parse_text('''acf 1
unit "spill.cu" {
    pin ptxas.dlcm = cg
    search {
        define.TERMS in {48, 64}
        ptxas.maxrregcount in {64, 128}
        ptxas.opt_level in 1..3
        ptxas.dlcm in {ca, cg}
        ptxas.override_directive_values in bool
    }
}
''').units[0]
SOURCE = DATA / "cuda" / "spill.cu"


def test_space_has_baseline_pins_and_source_defaults():
    space = build_space(UNIT, SOURCE)
    dims = {d.knob: d for d in space.dimensions}
    assert dims["define.TERMS"].baseline == 56 and dims["define.TERMS"].choices == (56, 48, 64)
    assert dims["ptxas.maxrregcount"].choices == (None, 64, 128)      # None: flag not passed
    assert dims["ptxas.opt_level"].baseline == 3
    assert dims["ptxas.dlcm"].pinned and dims["ptxas.dlcm"].choices == ("cg",)
    assert space.size == 3 * 3 * 3 * 1 * 2
    assert space.baseline().settings() == {"define.TERMS": 56, "ptxas.opt_level": 3, "ptxas.dlcm": "cg",
                                           "ptxas.override_directive_values": False}


def test_a_pin_outside_the_search_block_is_still_built_and_benched():
    unit = model.Unit(("x.cu",), pins=(model.Setting("define.BM", 16),),
                    space=(model.Space("define.BN", model.SetDomain((64, 128))),))
    space = build_space(unit, None)
    assert space.size == 3 and space.baseline().settings()["define.BM"] == 16      # BN: not passed, 64, 128
    assert next(d for d in space.dimensions if d.knob == "define.BM").pinned


def test_default_space_is_filtered_by_the_toolkit():
    unit = model.Unit(("x.cu",))
    space = build_space(unit, None, accepts=lambda name: name != "ptxas.dlcm")
    assert [d.knob for d in space.dimensions] == [k for k, _ in DEFAULT_SPACE if k != "ptxas.dlcm"]


def test_operators_are_reproducible_with_a_seed():
    space = build_space(UNIT, SOURCE)

    def walk(seed):
        rng = np.random.default_rng(seed)
        a, b = sample(space, rng), sample(space, rng)
        return [a, b, crossover(a, b, rng), mutate(a, space, rng, rate=1.0)]

    assert walk(5) == walk(5)
    assert walk(5) != walk(6)


def test_operators_stay_inside_the_space():
    space = build_space(UNIT, SOURCE)
    rng = np.random.default_rng(0)
    genomes = [sample(space, rng) for _ in range(50)]
    genomes += [mutate(crossover(a, b, rng), space, rng, 0.7) for a, b in zip(genomes, genomes[1:])]
    for genome in genomes:
        for (knob, value), dim in zip(genome.items, space.dimensions):
            assert knob == dim.knob and value in dim.choices


def test_repair_drops_meaningless_combinations():
    space = build_space(UNIT, SOURCE)
    broken = space.baseline().items
    broken = Genome(tuple((k, True if k == "ptxas.override_directive_values" else v) for k, v in broken))
    assert repair(broken, space).value("ptxas.override_directive_values") is False   # no cap to override with
    capped = space.genome({"ptxas.override_directive_values": True, "ptxas.maxrregcount": 128})
    assert capped.value("ptxas.override_directive_values") is True


def test_source_default_reads_the_define(tmp_path):
    source = tmp_path / "k.cu"
    source.write_text("#ifndef TILE\n#  define TILE 32\n#endif\n#define NAME fast\n#define RATE 0.5\n")
    assert source_default(source, "TILE") == 32 and source_default(source, "RATE") == 0.5
    assert source_default(source, "NAME") == "fast" and source_default(source, "MISSING") is None


def test_source_defaults_follow_quoted_includes_first_definition_wins(tmp_path):
    (tmp_path / "kernel.cuh").write_text('#ifndef DIM\n#define DIM 128\n#endif\n#define TILE 32\n#include "thin.cu"\n')
    thin = tmp_path / "thin.cu"
    thin.write_text('#define DIM 64\n#include "kernel.cuh"\n#include "missing.h"\n#include <cuda.h>\n')
    assert source_default(thin, "DIM") == 64 and source_default(thin, "TILE") == 32
    assert source_defines(thin) == {"DIM": 64, "TILE": 32}           # the include cycle back to thin.cu is cut
    assert source_defines(tmp_path / "kernel.cuh") == {"DIM": 128, "TILE": 32}
    unit = model.Unit(("thin.cu",), pins=(model.Setting("define.TILE", 16), model.Setting("ptxas.opt_level", 2)))
    assert unit_defines(unit, thin) == {"DIM": 64, "TILE": 16}                  # pins over the source's own


def test_repair_keeps_ptxas_from_conflicting_levels():
    unit = model.Unit(("x.cu",), space=(model.Space("ptxas.opt_level", model.RangeDomain(1, 3)),
                                      model.Space("ptxas.fast_compile", model.SetDomain(("0", "min", "max")))))
    space = build_space(unit, None)
    assert space.genome({"ptxas.opt_level": 2, "ptxas.fast_compile": "min"}).value("ptxas.fast_compile") == "0"
    assert space.genome({"ptxas.opt_level": 1, "ptxas.fast_compile": "max"}).value("ptxas.fast_compile") == "0"
    assert space.genome({"ptxas.opt_level": 1, "ptxas.fast_compile": "min"}).value("ptxas.fast_compile") == "min"
    assert space.genome({"ptxas.opt_level": 3, "ptxas.fast_compile": "max"}).value("ptxas.fast_compile") == "max"


def _ptxas_takes(ptx, tmp_path, genome: Genome) -> bool:
    """Real nvcc builds the PTX with the genome's flags, as a build writes them."""
    flags = [f for knob, value in genome.settings().items() for f in flag_text(knob, value)]
    done = subprocess.run(["nvcc", "-cubin", "-arch=sm_90", str(ptx), "-o", str(tmp_path / "k.cubin"), *flags],
                          capture_output=True, text=True)
    return done.returncode == 0


@pytest.mark.parametrize("fast", ["ptxas.fast_compile", "nvcc.fast_compile"])
def test_repair_keeps_exactly_the_level_pairs_ptxas_takes(tmp_path, fast):
    """ptxas 13.0 refuses an explicit -O beside -Ofc=min/mid/max except -O1 with min or mid and -O0 with max
    (-O3 is the default: no flag). The repair missed -O0 with min and mid, and nvcc's -Ofc (which reaches
    ptxas too) altogether: a search proposed them, and the build left the -Ofc out ("avoided: 2 proposal(s)
    the build would not take whole ... ptxas refuses -O0 with -Ofc=min"). Every pair, against real ptxas:
    a genome is its own repair exactly when ptxas takes it, and a repaired one is taken."""
    ptx = tmp_path / "spill.ptx"
    subprocess.run(["nvcc", "-ptx", "-arch=sm_90", str(SOURCE), "-o", str(ptx)], check=True)
    unit = model.Unit(("x.cu",), space=(model.Space("ptxas.opt_level", model.RangeDomain(0, 3)),
                                      model.Space(fast, model.SetDomain(("0", "min", "mid", "max")))))
    space = build_space(unit, None)
    for level, level_fast in itertools.product(range(4), ("0", "min", "mid", "max")):
        genome = Genome((("ptxas.opt_level", level), (fast, level_fast)))
        taken = _ptxas_takes(ptx, tmp_path, genome)
        assert (repair(genome, space) == genome) == taken, (genome, taken)
        assert _ptxas_takes(ptx, tmp_path, repair(genome, space)), genome
    pinned = model.Unit(("x.cu",), pins=(model.Setting(fast, "min"),),
                        space=(model.Space("ptxas.opt_level", model.RangeDomain(0, 3)),))
    space = build_space(pinned, None)       # the pin stays: the level gives way
    assert repair(Genome((("ptxas.opt_level", 0), (fast, "min"))), space).value("ptxas.opt_level") == 3


def test_step_moves_one_gene_to_a_neighbour():
    space = build_space(UNIT, SOURCE)
    rng = np.random.default_rng(4)
    start = space.genome({"ptxas.opt_level": 2, "define.TERMS": 48, "ptxas.maxrregcount": 64})
    for _ in range(30):
        moved = step(start, space, rng)
        changed = [(a, b) for a, b in zip(start.items, moved.items) if a != b]
        assert len(changed) == 1
        (knob, before), (_, after) = changed[0]
        choices = next(d.choices for d in space.dimensions if d.knob == knob)
        assert abs(choices.index(before) - choices.index(after)) == 1


# ---------------------------------------------------------------- requires over defines
CONSTRAINED = parse_text('''acf 1
unit "sgemm_regblock.cu" {
    search {
        define.BM in {32, 64, 128, 256}
        define.BN in {32, 64, 128, 256}
        define.TM in {1, 2, 4, 8}
        define.TN in {1, 2, 4, 8}
        define.BK in {8, 16, 32}
        ptxas.opt_level in 1..3
        require (BM / TM) * (BN / TN) <= 1024
        require (BM / TM) * (BN / TN) >= 64
        require BK * (BM + BN) * 4 <= 49152
    }
}
''').units[0]
REGBLOCK = DATA.parent.parent / "kernels" / "sgemm_regblock.cu"


def _threads(genome: Genome) -> int:
    s = genome.settings()
    return (s["define.BM"] // s["define.TM"]) * (s["define.BN"] // s["define.TN"])


def _allowed_by_hand(genome: Genome) -> bool:
    s = genome.settings()
    return 64 <= _threads(genome) <= 1024 and s["define.BK"] * (s["define.BM"] + s["define.BN"]) * 4 <= 49152


def test_requires_shrink_the_space_to_the_points_they_allow():
    space = build_space(CONSTRAINED, REGBLOCK)
    import itertools
    dims = space.dimensions
    points = [Genome(tuple(zip((d.knob for d in dims), values))) for values in itertools.product(*(d.choices for d in dims))]
    assert space.size == sum(_allowed_by_hand(g) for g in points) < len(points)
    assert all(space.allows(g) == _allowed_by_hand(g) for g in points)
    assert space.allows(space.baseline())            # the source's own BM=BN=64, TM=TN=8, BK=8: 64 threads


def test_no_operator_proposes_a_genome_the_requires_exclude():
    space = build_space(CONSTRAINED, REGBLOCK)
    rng = np.random.default_rng(7)
    a, b = sample(space, rng), sample(space, rng)
    made = []
    for _ in range(400):
        made += [sample(space, rng), mutate(a, space, rng, rate=0.9), step(a, space, rng),
                 crossover(a, b, rng, space), repair(Genome(tuple((k, 256 if k.startswith("define.B") and k != "define.BK"
                                                                  else (1 if k in ("define.TM", "define.TN") else v))
                                                                 for k, v in a.items)), space)]
        a, b = made[-4], made[-5]
    assert all(_allowed_by_hand(g) for g in made)
    assert len(set(made)) > 50                      # and they still explore


def test_the_engine_never_asks_for_an_excluded_genome_and_a_seed_reproduces_it():
    from nvcc_evo.engine.evolve import Engine, Evaluation
    space = build_space(CONSTRAINED, REGBLOCK)

    def run(seed):
        engine, asked = Engine(space, np.random.default_rng(seed), population=8, seeds=[space.baseline()]), []
        for _ in range(10):
            batch = engine.ask()
            asked += batch
            engine.tell([Evaluation(g, (float(_threads(g) % 97),)) for g in batch])
        return asked

    asked = run(3)
    assert len(asked) == 80 and all(_allowed_by_hand(g) for g in asked)
    assert run(3) == asked


def test_spread_draws_a_first_generation_farther_apart_than_samples():
    """space.spread: fresh points only, none twice, reproduced by a seed, and farther apart than as many
    samples (the least distance between two of them, in choice positions summed over the dimensions)."""
    from nvcc_evo.engine.space import Dimension, SearchSpace, spread
    space = SearchSpace(tuple(Dimension(f"define.X{i}", tuple(range(8)), 0) for i in range(5)))

    def closest(points: list[Genome]) -> float:
        where = np.array([[v for _, v in g.items] for g in points])
        return min(np.abs(a - b).sum() for a, b in itertools.combinations(where, 2))

    taken = {space.genome({"define.X0": 1})}
    spread_, sampled = [], []
    for seed in range(20):
        points = spread(space, np.random.default_rng(seed), 12, lambda g: g not in taken)
        assert len(set(points)) == 12 and not taken & set(points)
        assert points == spread(space, np.random.default_rng(seed), 12, lambda g: g not in taken)
        rng = np.random.default_rng(seed)
        spread_.append(closest(points))
        sampled.append(closest([sample(space, rng) for _ in range(12)]))
    assert np.mean(spread_) > 1.5 * np.mean(sampled), (np.mean(spread_), np.mean(sampled))
