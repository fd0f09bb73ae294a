"""On a GPU: the occupancy nvcc-evo computes from ptxas's report (its table
and CUDA's rules, nvcc_evo.cubin.occupancy) is the driver's own
(cuOccupancyMaxActiveBlocksPerMultiprocessor), and the per-kernel facts
read from ptxas are the function attributes the driver loads, for kernels
of several register counts, shared memory sizes and block sizes."""
from __future__ import annotations

import ctypes
import subprocess

import pytest

from nvcc_evo.cubin.occupancy import occupancy
from nvcc_evo.cubin.sass import kernel_facts

pytestmark = pytest.mark.gpu

SOURCE = r"""
template <int N, int SHARED> __global__ void work(const float* x, float* y) {
    __shared__ float s[SHARED > 0 ? SHARED : 1];
    float acc[N];
    for (int i = 0; i < N; ++i) acc[i] = x[i * blockDim.x + threadIdx.x];
    if (SHARED > 0) { s[threadIdx.x % SHARED] = acc[0]; __syncthreads(); acc[1] += s[(threadIdx.x + 1) % SHARED]; }
    float t = 0;
    for (int i = 0; i < N; ++i) for (int j = 0; j < N; ++j) t += acc[i] * acc[(i + j) % N];
    y[threadIdx.x] = t;
}
template __global__ void work<4, 0>(const float*, float*);
template __global__ void work<24, 0>(const float*, float*);
template __global__ void work<48, 2048>(const float*, float*);
template __global__ void work<96, 12288>(const float*, float*);
template __global__ void work<16, 10240>(const float*, float*);
"""
NUM_REGS, SHARED_SIZE_BYTES = 4, 1            # CUfunction_attribute


def _cuda():
    cuda = ctypes.CDLL("libcuda.so.1")
    assert cuda.cuInit(0) == 0
    device, context = ctypes.c_int(), ctypes.c_void_p()
    assert cuda.cuDeviceGet(ctypes.byref(device), 0) == 0
    assert cuda.cuDevicePrimaryCtxRetain(ctypes.byref(context), device) == 0
    assert cuda.cuCtxPushCurrent_v2(context) == 0
    major, minor = ctypes.c_int(), ctypes.c_int()
    cuda.cuDeviceGetAttribute(ctypes.byref(major), 75, device)      # COMPUTE_CAPABILITY_MAJOR
    cuda.cuDeviceGetAttribute(ctypes.byref(minor), 76, device)
    return cuda, f"sm_{major.value}{minor.value}"


def test_occupancy_and_kernel_facts_are_the_drivers(tmp_path):
    cuda, arch = _cuda()
    (tmp_path / "work.cu").write_text(SOURCE)
    compared = 0
    for cap in (32, 64, 128, 255):
        cubin = tmp_path / f"work{cap}.cubin"
        done = subprocess.run(["nvcc", "-cubin", f"-arch={arch}", "-Xptxas", "-v", f"-maxrregcount={cap}",
                               "work.cu", "-o", cubin.name], cwd=tmp_path, capture_output=True, text=True, check=True)
        module = ctypes.c_void_p()
        assert cuda.cuModuleLoadData(ctypes.byref(module), ctypes.c_char_p(cubin.read_bytes())) == 0
        kernels = kernel_facts(done.stderr, cubin.read_bytes(), arch)
        assert len(kernels) == 5
        for kernel in kernels:
            function = ctypes.c_void_p()
            assert cuda.cuModuleGetFunction(ctypes.byref(function), module, kernel.name.encode()) == 0
            regs, shared = ctypes.c_int(), ctypes.c_int()
            cuda.cuFuncGetAttribute(ctypes.byref(regs), NUM_REGS, function)
            cuda.cuFuncGetAttribute(ctypes.byref(shared), SHARED_SIZE_BYTES, function)
            assert (kernel.registers, kernel.shared) == (regs.value, shared.value), kernel.name
            for threads in (64, 128, 256, 512, 768, 1024):
                blocks = ctypes.c_int()
                assert cuda.cuOccupancyMaxActiveBlocksPerMultiprocessor(ctypes.byref(blocks), function, threads,
                                                                        ctypes.c_size_t(0)) == 0
                ours = occupancy(arch, threads, kernel.registers, kernel.shared, 0, kernel.barriers)
                assert ours.blocks == blocks.value, (kernel.name, threads, kernel, ours, blocks.value)
                compared += 1
        cuda.cuModuleUnload(module)
    print(f"{compared} kernel and block-size cases on {arch}: the driver's occupancy")
