"""The watchdog on a real GPU (issue 37): a candidate whose kernel never ends
(a deadlock, as a register cap under setmaxnreg's allocation makes one) is
stopped within the retune's timeout, recorded as `timeout`, and the search
goes on with the GPU usable: the pycuda backend's measuring process is
killed with its CUDA context and a fresh one measures the next candidate; a
bench command's process group is killed at its `timeout`. Run on a machine
with an NVIDIA GPU (skipped elsewhere with the reason)."""
from __future__ import annotations

import json
import shlex
import shutil
from pathlib import Path

import pytest

from conftest import DATA, EVO_COMMAND, FAULTY_BENCH, evo_env, run_evo

pytestmark = pytest.mark.gpu

SPINNING = "define.SPIN in {0, 1}"     # tests/data/cuda/faulty.cu: SPIN=1 loops on a flag no one sets


def _records(folder: Path) -> list[dict]:
    return [json.loads(line) for line in (folder / ".nvcc-evo" / "results.jsonl").read_text().splitlines()]


def test_a_pycuda_candidate_that_never_ends_is_a_timeout_and_the_search_goes_on(tmp_path, evo_cache):
    shutil.copy(DATA / "cuda" / "faulty.cu", tmp_path / "faulty.cu")
    (tmp_path / "nvcc-evo.acf").write_text(
        'acf 1\nunit "faulty.cu" {\n    search {\n        ' + SPINNING + '\n'
        '        define.BLOCK in {128, 256, 512}\n    }\n    tune {\n        minimize runtime\n    }'
        + FAULTY_BENCH + '}\n')
    done = run_evo("--retune", "--backend", "pycuda", "--evaluations", "6", "--timeout", "20", cwd=tmp_path,
                   env=evo_env(evo_cache))
    assert done.returncode == 0, done.stderr
    records = _records(tmp_path)
    hung = [i for i, r in enumerate(records) if r["status"] == "timeout"]
    assert hung, records
    assert all("SPIN=1" in " ".join(records[i]["flags"]) for i in hung)
    assert all("no answer within 20 s" in records[i]["detail"] for i in hung)
    # measured after a hang: the fresh measuring process had the GPU
    assert any(r["status"] == "ok" for r in records[hung[0] + 1:]), records
    assert "define.SPIN = 1" not in (tmp_path / "nvcc-evo.acf").read_text()


PROGRAM = """\
#include <cstdio>
#ifndef SPIN
#define SPIN 0
#endif
__device__ int never_set = 0;
__global__ void scale(float *x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (SPIN)
        while (*(volatile int *)&never_set == 0) {}
    if (i < n) x[i] *= 2.0f;
}
int main() {
    const int n = 1 << 24;
    float *x;
    cudaMalloc(&x, n * sizeof(float));
    cudaEvent_t a, b;
    cudaEventCreate(&a);
    cudaEventCreate(&b);
    scale<<<n / 256, 256>>>(x, n);
    cudaEventRecord(a);
    for (int r = 0; r < 20; ++r) scale<<<n / 256, 256>>>(x, n);
    cudaEventRecord(b);
    if (cudaEventSynchronize(b) != cudaSuccess) return 1;
    float ms = 0;
    cudaEventElapsedTime(&ms, a, b);
    printf("time %.4f ms\\n", ms / 20);
    return 0;
}
"""


def test_a_bench_command_whose_kernel_never_ends_is_a_timeout_and_the_search_goes_on(tmp_path, evo_cache):
    (tmp_path / "main.cu").write_text(PROGRAM)
    command = f"{shlex.join(EVO_COMMAND)} -arch=sm_90 -o prog main.cu && ./prog"
    (tmp_path / "nvcc-evo.acf").write_text(
        'acf 1\nunit "main.cu" {\n    search {\n        ' + SPINNING + '\n'
        '        ptxas.opt_level in {1, 3}\n    }\n    bench {\n'
        f'        command "{command}"\n        metric time "time ([0-9.]+) ms"\n        timeout 30\n'
        '    }\n}\n')
    env = evo_env(evo_cache)
    done = run_evo("--retune", "--backend", "command", "--evaluations", "3", cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stderr
    records = _records(tmp_path)
    hung = [i for i, r in enumerate(records) if r["status"] == "timeout"]
    assert hung and all("SPIN=1" in " ".join(records[i]["flags"]) for i in hung), records
    assert any(r["status"] == "ok" for r in records[hung[0] + 1:]), records
    assert "define.SPIN = 1" not in (tmp_path / "nvcc-evo.acf").read_text()
