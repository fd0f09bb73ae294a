"""One rule chooses a unit's target block (driver.match.units.choose_target): the retune reads the block
a build that names no GPU compiles with, from the ACF's model as from the build's index of it."""
from __future__ import annotations

import pytest

from nvcc_evo.acf.parse import parse_text
from nvcc_evo.driver.match.index import load_units
from nvcc_evo.driver.match.units import choose_target, entry_for

BLOCKS = {
    "plain and named": ('target sm_90 "NVIDIA H200" { ptxas.opt_level = 1 }', 'target sm_90 { ptxas.opt_level = 2 }'),
    "two named, none plain": ('target sm_90 "NVIDIA H100" { ptxas.opt_level = 1 }',
                              'target sm_90 "NVIDIA H200" { ptxas.opt_level = 2 }'),
    "one named": ('target sm_90 "NVIDIA H200" { ptxas.opt_level = 3 }',),
    "the architecture's for its a variant": ('target sm_90 { ptxas.opt_level = 2 }',),
}


@pytest.mark.parametrize("kind", sorted(BLOCKS))
@pytest.mark.parametrize("arch", ["sm_90", "sm_90a"])
@pytest.mark.parametrize("gpu", [None, "NVIDIA H200"])
def test_the_retune_reads_the_block_a_build_chooses(tmp_path, kind, arch, gpu):
    """Where a GPU-named block exists the two rules answered differently: two named blocks and none plain
    gave the retune the first (a build, none: it asks for NVCC_EVO_GPU), and sm_90a no block where a build
    uses sm_90's; a build for a named GPU (NVCC_EVO_GPU) read that GPU's block and the retune the plain one."""
    text = 'acf 1\nunit "k.cu" {\n' + "".join(f"    {block}\n" for block in BLOCKS[kind]) + "}\n"
    acf = tmp_path / "k.acf"
    acf.write_text(text)
    (unit,) = parse_text(text, str(acf)).units
    (indexed,) = load_units(acf, None)
    read, built = entry_for(unit, arch, gpu), choose_target(indexed, arch, gpu)[0]
    assert (read and read.span.line) == (built and built.line)
    if kind != "the architecture's for its a variant" and gpu is not None:
        assert read is not None and read.gpu == gpu
    elif kind == "two named, none plain":
        assert read is None
    elif kind.startswith("the architecture's"):
        assert read is not None and read.arch == "sm_90"
