"""Per kernel, not per file: a translation unit of three kernels, built with
the real nvcc and ptxas, reads as three kernels (registers, spills, shared
memory, barriers, instructions, the instruction mix from the real
nvdisasm); the end of a retune, `--sass` and the report set the baseline's
and the chosen build's kernels side by side, with each kernel's occupancy
at the block size its bench launches it with (the report checked in a real
headless browser)."""
from __future__ import annotations

import os
import re
import stat
import subprocess
import sys
import types
from pathlib import Path

import pytest

from conftest import evo_env, run_evo
from nvcc_evo.cubin.sass import instruction_count
from nvcc_evo.cubin import mix, sass
from nvcc_evo.cubin.occupancy import occupancy
from nvcc_evo.kerneldiff.compare import BuiltKernels, Comparison, KernelLaunch, KernelStore
from nvcc_evo.report.page import kernel_tables
from nvcc_evo.kerneldiff.view import lines

SOURCE = r"""
#ifndef BLOCK
#define BLOCK 128
#endif
extern "C" __global__ void axpy(float a, const float* x, float* y, int n) {
    int i = blockIdx.x * BLOCK + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}
extern "C" __global__ void tile(const float* x, float* y) {
    __shared__ float s[1024];
    s[threadIdx.x] = x[threadIdx.x];
    __syncthreads();
    y[threadIdx.x] = s[1023 - threadIdx.x] * 2.0f;
}
template <int N> __global__ void heavy(const double* x, double* y) {
    double acc[N];
    for (int i = 0; i < N; ++i) acc[i] = x[i * threadIdx.x];
    double s = 0;
    for (int i = 0; i < N; ++i) s += acc[(i * 7) % N] * acc[i];
    y[threadIdx.x] = s;
}
template __global__ void heavy<64>(const double*, double*);
"""

ACF = """acf 1
unit "multi.cu" {
    pin ptxas.maxrregcount = 32
    search {
        define.BLOCK in {128, 256}
        ptxas.opt_level in 1..3
    }
    tune {
        minimize spills, registers
    }
    bench {
        kernel axpy
        let N = 4096
        arg a : f32 = 2
        arg x : f32[N] = random(seed=1)
        arg y : f32[N] = output
        arg n : i32 = N
        grid (cdiv(N, BLOCK))
        block (BLOCK)
        check y rtol 1e-5
    }
}
"""
HEAVY = "_Z5heavyILi64EEvPKdPd"


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> tuple[str, bytes]:
    folder = tmp_path_factory.mktemp("multi")
    (folder / "multi.cu").write_text(SOURCE)
    done = subprocess.run(["nvcc", "-cubin", "-arch=sm_90", "-Xptxas", "-v", "-maxrregcount=32", "multi.cu",
                           "-o", "multi.cubin"], cwd=folder, capture_output=True, text=True, check=True)
    return done.stderr, (folder / "multi.cubin").read_bytes()


@pytest.fixture(scope="module")
def retuned(tmp_path_factory, evo_cache) -> tuple[Path, subprocess.CompletedProcess]:
    folder = tmp_path_factory.mktemp("project")
    (folder / "multi.cu").write_text(SOURCE)
    (folder / "nvcc-evo.acf").write_text(ACF)
    done = run_evo("--retune", "--backend", "static", "--target", "sm_90", "--evaluations", "5", cwd=folder,
                   env=evo_env(evo_cache))
    assert done.returncode == 0, done.stderr
    return folder, done


def test_each_kernel_has_its_own_facts(built):
    stderr, cubin = built
    kernels = {k.name: k for k in sass.kernel_facts(stderr, cubin, "sm_90")}
    assert sorted(kernels) == [HEAVY, "axpy", "tile"]
    for name, k in kernels.items():              # each as ptxas said it, not the file's maximum or sum
        block = stderr[stderr.index(f"Compiling entry function '{name}'"):]
        assert k.registers == int(re.search(r"Used (\d+) registers", block).group(1)), name
    assert kernels[HEAVY].spills > 0 and kernels["axpy"].spills == kernels["tile"].spills == 0
    assert (kernels["tile"].shared, kernels["tile"].barriers, kernels["axpy"].shared) == (4096, 1, 0)
    assert sum(k.instructions for k in kernels.values()) == instruction_count(cubin)


def test_relocatable_code_has_its_shared_memory_too(tmp_path):
    """-rdc (CMake's CUDA_SEPARABLE_COMPILATION): ptxas -v names no smem, the link places it, and
    --sass, the summary and the static backend said 0 bytes for cuda-samples' matrixMul (8 KB of
    __shared__ tiles); the cubin's relocations name each kernel's __shared__ variables, through the
    device functions it calls, the same bytes ptxas reports of the whole-program build."""
    from nvcc_evo.cubin.compile import CompileResult
    from nvcc_evo.measure.static import measure
    (tmp_path / "multi.cu").write_text(SOURCE + CALLS)
    facts = {}
    for mode in ("-rdc=true", "-rdc=false"):
        done = subprocess.run(["nvcc", "-cubin", "-arch=sm_90", "-Xptxas", "-v", mode, "multi.cu", "-o", "m.cubin"],
                              cwd=tmp_path, capture_output=True, text=True, check=True)
        cubin = (tmp_path / "m.cubin").read_bytes()
        facts[mode] = {k.name: k.shared for k in sass.kernel_facts(done.stderr, cubin, "sm_90")}
        static = measure(CompileResult("ok", 0.1, done.stderr, cubin), "sm_90")
        assert static.get("shared") == 4096, (mode, static)
    assert facts["-rdc=true"] == facts["-rdc=false"]
    assert (facts["-rdc=true"]["tile"], facts["-rdc=true"]["calls"], facts["-rdc=true"]["axpy"]) == (4096, 1600, 0)


CALLS = r"""
__device__ __noinline__ float helper(float v) {
    __shared__ float pad[300];
    pad[threadIdx.x] = v;
    __syncthreads();
    return pad[299 - threadIdx.x];
}
extern "C" __global__ void calls(const float* x, float* y) {
    __shared__ float s[100];
    s[threadIdx.x] = x[threadIdx.x];
    __syncthreads();
    y[threadIdx.x] = helper(s[99 - threadIdx.x]);
}
"""


def test_the_instruction_mix_comes_from_nvdisasm(built):
    stderr, cubin = built
    tool = mix.find_disassembler()
    assert tool, mix.MISSING                      # (make test installs nvidia-cuda-nvdisasm)
    kernels = {k.name: k for k in sass.with_mix(sass.kernel_facts(stderr, cubin, "sm_90"), cubin, tool)}
    for k in kernels.values():
        assert sum(count for _, count in k.mix) == k.instructions, k.name     # every instruction, once
    tile, heavy, axpy = kernels["tile"].classes(), kernels[HEAVY].classes(), kernels["axpy"].classes()
    assert tile["shared load"] >= 1 and tile["shared store"] >= 1 and tile["barriers"] >= 1
    assert heavy["local (spills)"] > 0 and heavy["fp64"] > 0 and axpy["local (spills)"] == 0
    assert axpy["fp32"] >= 1 and axpy["global load"] == 2 and axpy["global store"] == 1


def test_without_a_disassembler_the_facts_stay_and_the_page_says_how_to_get_it(built, tmp_path, monkeypatch):
    stderr, cubin = built
    nvcc = tmp_path / "bin" / "nvcc"
    nvcc.parent.mkdir()
    beside = nvcc.parent / "nvdisasm"
    beside.write_text("#!/bin/sh\n")
    beside.chmod(beside.stat().st_mode | stat.S_IXUSR)
    assert mix.find_disassembler(str(nvcc)) == str(beside)          # the toolkit's own first
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.setitem(sys.modules, "nvidia", types.SimpleNamespace(__path__=[str(tmp_path / "none")]))
    assert mix.find_disassembler("/nowhere/nvcc") is None
    kernels = sass.kernel_facts(stderr, cubin, "sm_90")
    assert sass.with_mix(kernels, cubin, None) == kernels
    build = BuiltKernels("h", kernels, KernelLaunch("axpy", 256))
    said = "\n".join(lines(Comparison('"multi.cu"', "sm_90", "cpu", "static", build, build, mix.MISSING)))
    assert "pip install nvidia-cuda-nvdisasm" in said and "registers" in said and "fp32" not in said
    assert "pip install nvidia-cuda-nvdisasm" in kernel_tables(Comparison("u", "sm_90", "cpu", "static", build, build,
                                                                          mix.MISSING))


def test_the_end_of_a_retune_compares_each_kernel_with_its_occupancy(retuned, built):
    folder, done = retuned
    said = done.stdout[done.stdout.index("per kernel, baseline -> chosen [sm_90]:"):]
    for name in ("axpy", "tile", "void heavy<64>(double const*, double*)"):
        assert f"\n    {name}" in said, said
    tables = dict(re.findall(r"\n    (\S[^\n]*)((?:\n      [^\n]*)+)", said))          # kernel -> its table
    axpy = tables["axpy"]
    stderr, _ = built                                 # the baseline: BLOCK 128 (the source's), the pin's cap 32
    registers = int(re.search(r"Used (\d+) registers", stderr[stderr.index("'axpy'"):]).group(1))
    expected = occupancy("sm_90", 128, registers)
    assert re.search(rf"occupancy \(warps/SM\)\s+{expected.warps}/64 \({expected.blocks} x 128 threads; "
                     rf"{expected.limiter}\)", axpy), axpy
    assert "occupancy" not in tables["tile"] + tables["void heavy<64>(double const*, double*)  (" + HEAVY + ")"]
    stored = KernelStore(folder / ".nvcc-evo" / "kernels.jsonl").read()
    assert len(stored) == 1 and sorted(k.name for k in stored[0].baseline.kernels) == [HEAVY, "axpy", "tile"]


def test_sass_shows_one_unit_in_the_terminal(retuned, evo_cache):
    folder, _ = retuned
    done = run_evo("--sass", "multi.cu", "--target", "sm_90", cwd=folder, env=evo_env(evo_cache))
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith('"multi.cu" [sm_90]: the build\'s own flags against its ACF entry\n')
    assert "  local (spills)" in done.stdout and "occupancy (warps/SM)" in done.stdout
    nothing = run_evo("--sass", "other.cu", cwd=folder, env=evo_env(evo_cache))
    assert nothing.returncode == 2 and "other.cu" in nothing.stderr


def test_the_report_sets_the_kernels_side_by_side_in_a_real_browser(retuned, evo_cache):
    from test_report import _browser
    folder, _ = retuned
    done = run_evo("--report", cwd=folder, env=evo_env(evo_cache))
    assert done.returncode == 0, done.stderr
    page = (folder / ".nvcc-evo" / "report.html").read_text()
    assert page.count('<table class="kernel">') == 3
    assert "<td>occupancy (warps/SM)</td>" in page and "<td>  local (spills)</td>" in page
    browser = _browser()
    if browser is None:
        pytest.skip("no headless browser (apt-get install chromium-headless-shell, or chromium, or firefox)")
    if "firefox" in browser:
        pytest.skip("the DOM is read with Chromium's --dump-dom")
    dom = subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--dump-dom",
                          (folder / ".nvcc-evo" / "report.html").as_uri()], capture_output=True, text=True,
                         timeout=120, env={**os.environ, "HOME": str(folder)}).stdout
    assert dom.count('<table class="kernel">') == 3 and "void heavy&lt;64&gt;(double const*, double*)" in dom
