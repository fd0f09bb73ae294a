"""kernels/: every unit of the project's ACF compiles for sm_90 without
spilling at its own defaults, and its bench spec evaluates with them."""
from __future__ import annotations

import shutil
import subprocess

import pytest

from conftest import ROOT
from nvcc_evo.acf.bench.spec import plan_bench
from nvcc_evo.acf.resolve import load
from nvcc_evo.acf.sources import unit_defines
from nvcc_evo.cubin.compile import CompileJob, compile_candidate
from nvcc_evo.measure import static

ACF = load(ROOT / "kernels" / "nvcc-evo.acf")


@pytest.mark.parametrize("unit", ACF.units, ids=[u.globs[0] for u in ACF.units])
def test_kernel_compiles_and_its_bench_evaluates(unit):
    source = ROOT / "kernels" / unit.globs[0]
    job = CompileJob(shutil.which("nvcc"), ("-c", source.name), str(source.parent), source.name, "sm_90")
    measured = static.measure(compile_candidate(job), "sm_90")
    assert measured.ok, measured.detail
    assert measured.get("spills") == 0
    plan = plan_bench(unit.bench, unit_defines(unit, source))
    assert plan.kernel and plan.grid[0] > 0 and plan.checks
    assert plan.bytes_moved >= 32 * 2**20            # big enough to time (the L2 is flushed between launches)


def test_every_kernel_file_has_a_unit():
    covered = {u.globs[0] for u in ACF.units}
    assert {p.name for p in (ROOT / "kernels").glob("*.cu")} == covered


def test_the_project_acf_is_in_canonical_form():
    from nvcc_evo.acf.edit.format import format_text
    text = (ROOT / "kernels" / "nvcc-evo.acf").read_text()
    assert format_text(text) == text


@pytest.mark.parametrize("stages", [2, 3])
def test_pipelined_gemm_copies_slabs_asynchronously(tmp_path, stages):
    """hgemm_wmma.cu with STAGES > 1 moves slabs with cp.async (LDGSTS in
    SASS), fits static shared memory, and does not spill; STAGES=1 does not."""
    from conftest import sass
    sources = {}
    for depth in (1, stages):
        out = tmp_path / f"stages{depth}.o"
        done = subprocess.run(["nvcc", "-arch=sm_90", "-c", "hgemm_wmma.cu", "-o", str(out), "-Xptxas", "-v",
                               f"-DSTAGES={depth}", "-DBK=32", "-DBN=64", "-DWARPS_M=4", "-DWARPS_N=1"],
                              cwd=ROOT / "kernels", capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        assert " 0 bytes spill stores" in done.stderr
        sources[depth] = sass(out)
    assert "LDGSTS" in sources[stages] and "LDGSTS" not in sources[1]
