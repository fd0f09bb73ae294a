"""Search spaces from units, and the seeded operators."""
from __future__ import annotations

import numpy as np

from conftest import DATA
from nvcc_evo.acf import model
from nvcc_evo.acf.parse import parse_text
from nvcc_evo.acf.sources import source_default, source_defines, unit_defines
from nvcc_evo.search.space import DEFAULT_SPACE, Genome, build_space, crossover, mutate, repair, sample, step

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
