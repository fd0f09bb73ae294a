"""Candidate compiles with the real nvcc and ptxas: PTX reuse gives the
full pipeline's SASS, and runs only ptxas for ptxas-only differences."""
from __future__ import annotations

import shutil
from dataclasses import replace
from pathlib import Path

import pytest

from nvcc_evo.cubin.compile import CompileJob, PtxCache, compile_candidate, compile_each, front_end
from nvcc_evo.cubin.sass import sass_hash
from nvcc_evo.measure import static

ROOT = Path(__file__).resolve().parent.parent
PTXAS_ONLY = [("-Xptxas", "-O1"), ("-Xptxas", "-O2", "-Xptxas", "--register-usage-level=9"),
              ("-Xptxas", "-maxrregcount=64", "-Xptxas", "-dlcm=cg")]


@pytest.fixture
def job(real_nvcc, tmp_path) -> CompileJob:
    shutil.copy(ROOT / "kernels" / "sgemm_regblock.cu", tmp_path)
    return CompileJob(str(real_nvcc), ("-c", "sgemm_regblock.cu", "-O3"), str(tmp_path), "sgemm_regblock.cu",
                      "sm_90", ("-DBM=128",))


def test_the_front_end_leaves_out_only_ptxas_options(job):
    assert front_end(replace(job, flags=("-DBM=128", "-Xptxas", "-O1"))) == front_end(job)
    assert front_end(replace(job, flags=("-DBM=64", "-Xptxas", "-O1"))) != front_end(job)
    assert front_end(replace(job, flags=("-DBM=128", "-maxrregcount=64"))) != front_end(job)   # nvcc's caps cicc too


def test_ptx_reuse_gives_the_full_pipelines_sass_and_runs_only_ptxas(job):
    cache = PtxCache()
    first = compile_candidate(job, cache)
    assert first.ok and first.ptx and cache.reused == 0
    for extra in PTXAS_ONLY:
        candidate = replace(job, flags=job.flags + extra)
        reused, full = compile_candidate(candidate, cache), compile_candidate(candidate)
        assert reused.ok and full.ok
        assert sass_hash(reused.cubin) == sass_hash(full.cubin)
        assert static.measure(reused, "sm_90").metrics[:5] == static.measure(full, "sm_90").metrics[:5]
        assert "cicc" not in reused.stderr and reused.seconds < full.seconds
    assert cache.reused == len(PTXAS_ONLY)
    differs = {sass_hash(compile_candidate(replace(job, flags=job.flags + e), cache).cubin) for e in PTXAS_ONLY}
    assert len(differs) == len(PTXAS_ONLY)              # the options did reach ptxas


def test_a_ptxas_error_on_a_reused_ptx_is_a_result_like_the_full_pipelines(job):
    cache = PtxCache()
    assert compile_candidate(job, cache).ok
    bad = replace(job, flags=job.flags + ("-Xptxas", "-O2", "-Xptxas", "-Ofc=max"))
    reused, full = compile_candidate(bad, cache), compile_candidate(bad)
    assert reused.status == full.status == "compile-error"
    assert "Conflicting options" in reused.stderr and "Conflicting options" in full.stderr


def test_a_front_end_whose_first_candidate_failed_in_ptxas_is_not_compiled_again(job):
    """The front end's PTX is kept from a candidate ptxas rejected: the next
    candidate of that front end runs ptxas only, with the full pipeline's SASS."""
    cache = PtxCache()
    bad = compile_candidate(replace(job, flags=job.flags + ("-Xptxas", "-O2", "-Xptxas", "-Ofc=max")), cache)
    assert bad.status == "compile-error" and "Conflicting options" in bad.stderr
    assert front_end(job) in cache.ptx
    good = replace(job, flags=job.flags + PTXAS_ONLY[0])
    reused = compile_candidate(good, cache)
    assert reused.ok and cache.reused == 1 and "cicc" not in reused.stderr
    assert sass_hash(reused.cubin) == sass_hash(compile_candidate(good).cubin)


def test_a_front_end_error_keeps_no_ptx(job):
    cache = PtxCache()
    broken = compile_candidate(replace(job, flags=job.flags + ("-DBK=0", "-DTM=0")), cache)
    assert broken.status == "compile-error" and not broken.ptx
    assert front_end(replace(job, flags=job.flags + ("-DBK=0", "-DTM=0"))) not in cache.ptx


def test_candidates_of_one_front_end_compiled_together_share_one_ptx(job):
    cache = PtxCache()
    jobs = [replace(job, flags=job.flags + extra) for extra in PTXAS_ONLY] + [replace(job, flags=("-DBM=64",))]
    results = dict(compile_each(jobs, workers=2, ptx=cache))
    assert all(r.ok for r in results.values())
    assert cache.reused == len(PTXAS_ONLY) - 1 and len(cache.ptx) == 2


# A unit whose kernels are all templates and which holds a name of internal linkage (cuda::std's, cooperative
# groups', or its own): nvcc's module id, in the cubin's names, ends with the id of the process that compiled it.
TEMPLATES_ONLY = """\
namespace { __device__ int calls; }
template <class T> __global__ void twice(T *p) { p[threadIdx.x] *= 2; atomicAdd(&calls, 1); }
template __global__ void twice<float>(float *);
"""


@pytest.mark.parametrize("build", [(), ("-rdc=true", "-lineinfo")])      # (the second: PTX sections named by a hash)
def test_two_compiles_of_a_unit_whose_module_id_names_a_process_have_one_sass_hash(real_nvcc, tmp_path, build):
    """Found building NVIDIA/cuda-samples' reduction (CMake: -rdc=true -lineinfo): every ship check failed,
    as a compile of the build's flags never gave the measured candidate's hash."""
    (tmp_path / "t.cu").write_text(TEMPLATES_ONLY)
    job = CompileJob(str(real_nvcc), ("-c", "t.cu", *build), str(tmp_path), "t.cu", "sm_90")
    first, second = compile_candidate(job), compile_candidate(job)
    assert first.ok and second.ok and first.cubin != second.cubin      # (nvcc's own: the process ids differ)
    assert first.module_id and first.module_id != second.module_id
    assert sass_hash(first.cubin, first.module_id) == sass_hash(second.cubin, second.module_id)
    cache = PtxCache()
    assert compile_candidate(job, cache).ok
    other = replace(job, flags=("-Xptxas", "-O0"))
    reused, full = compile_candidate(other, cache), compile_candidate(other)
    assert cache.reused == 1 and reused.module_id
    assert sass_hash(reused.cubin, reused.module_id) == sass_hash(full.cubin, full.module_id)
    assert sass_hash(full.cubin, full.module_id) != sass_hash(first.cubin, first.module_id)
