"""The curated starting points: readable data in the package, a family for
each kernel of kernels/, only knobs and values the ACF language has, and
seeds in a new unit's first generation only."""
from __future__ import annotations

from pathlib import Path

import pytest

from nvcc_evo.acf import knobs
from nvcc_evo.acf.parse import parse_text
from nvcc_evo.engine import boosters
from nvcc_evo.retune.search.tune import _seeds
from nvcc_evo.retune.scope.staleness import ASKED
from nvcc_evo.retune.scope.tasks import Task
from nvcc_evo.engine.space import build_space

KERNELS = Path(__file__).resolve().parent.parent / "kernels"


@pytest.mark.parametrize("source, family", [
    ("sgemm_regblock.cu", "gemm"), ("hgemm_wmma.cu", "gemm"), ("hgemm_decode.cu", "gemm"),
    ("flash_attention.cu", "attention"), ("flash_attention_d64.cu", "attention"),
    ("decode_attention.cu", "attention"), ("softmax.cu", "memory-bound"), ("rmsnorm.cu", "memory-bound"),
    ("reduce_sum.cu", "memory-bound"), ("scale.cu", "memory-bound")])
def test_each_kernel_of_the_suite_has_its_family(source, family):
    assert boosters.family_of(KERNELS / source).name == family


def test_a_family_is_also_known_by_its_text(tmp_path):
    source = tmp_path / "my_kernel.cu"
    source.write_text("__global__ void k() { wmma::mma_sync(c, a, b, c); }\n")
    assert boosters.family_of(source).name == "gemm"
    source.write_text("__global__ void k() {}\n")
    assert boosters.family_of(source) is None


def test_every_seed_is_knobs_and_values_of_the_language():
    for family in boosters.families():
        assert family.seeds, family.name
        for seed in family.seeds:
            assert seed.origin
            for name, value in seed.knobs:
                knob = knobs.lookup(name)
                assert knob.accepts(value) if knob else knobs.is_define(name) and \
                    knobs.define_value_problem(value) is None, (family.name, name, value)


def _task(acf_text: str, tmp_path) -> Task:
    (tmp_path / "softmax.cu").write_text((KERNELS / "softmax.cu").read_text())
    (tmp_path / "block_reduce.cuh").write_text((KERNELS / "block_reduce.cuh").read_text())
    unit = parse_text(acf_text, "nvcc-evo.acf").units[0]
    return Task(0, unit, "sm_90", tmp_path / "softmax.cu", None, "", (ASKED,))


SPACE = 'acf 1\nunit "softmax.cu" {\n    search {\n        define.VEC in {1, 2, 4}\n' \
        '        define.ITEMS in {1, 2, 4, 8}\n        ptxas.opt_level in 1..3\n    }\n'


def test_a_new_unit_is_seeded_with_its_familys_winners(tmp_path):
    task = _task(SPACE + "}\n", tmp_path)
    space = build_space(task.unit, task.source)
    seeds = _seeds(task, space)
    assert seeds[0] == space.baseline()
    shown = [dict(g.items) for g in seeds[1:]]
    assert {"define.VEC": 2, "define.ITEMS": 8, "ptxas.opt_level": 1} in shown      # softmax's own win
    assert len(seeds) == len(set(seeds))


def test_a_tuned_unit_gets_no_curated_seeds(tmp_path):
    task = _task(SPACE + "    target sm_90 {\n        define.VEC = 4\n    }\n}\n", tmp_path)
    space = build_space(task.unit, task.source)
    assert len(_seeds(task, space)) == 2             # the baseline and its own entry
