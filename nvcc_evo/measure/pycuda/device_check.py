"""The outputs' check on the GPU: each checked output compared with its
reference where both already are, in the measuring process's context.

A candidate's outputs are never copied back to the host to be judged: a
comparison kernel counts the elements outside the bench's tolerances (with
the same rule as measure.check: |out - ref| <= atol + rtol |ref| on float64
values, exact equality for exact checks, NaN never passing) and returns two
numbers. Only a candidate that fails goes through the host check, which says
what is wrong in words. The kernels are compiled once per GPU architecture
with the real nvcc and kept in nvcc-evo's cache folder; where that cannot be
done (no nvcc, a reference too large to keep on the device) the host check
answers as before.
"""
from __future__ import annotations

import hashlib
import os
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from nvcc_evo.acf.bench.spec import DTYPES, BenchPlan
from nvcc_evo.driver.common import NvccNotFound, find_real_nvcc, replace_file
from nvcc_evo.driver.toolkit import cache_folder
from nvcc_evo.system.files import folders

# The C type each bench dtype is read as (bf16 is its raw upper 16 bits).
C_TYPES = {"f16": "__half", "bf16": "bf16_bits", "f32": "float", "f64": "double",
           "i8": "signed char", "u8": "unsigned char", "i16": "short", "u16": "unsigned short",
           "i32": "int", "u32": "unsigned int", "i64": "long long", "u64": "unsigned long long"}

KEPT_BYTES = 8 << 30          # float64 references kept on the device, at most
BLOCK, GRID = 256, 1024       # threads of the comparison (a grid-stride loop)

SOURCE = r"""
#include <cuda_fp16.h>
struct bf16_bits { unsigned short bits; };
template <typename T> __device__ double value(const T* p, unsigned long long i) {
    return (double)p[i];
}
template <> __device__ double value<__half>(const __half* p, unsigned long long i) {
    return (double)__half2float(p[i]);
}
template <> __device__ double value<bf16_bits>(const bf16_bits* p, unsigned long long i) {
    return (double)__uint_as_float(((unsigned)p[i].bits) << 16);
}
// *count += the elements outside the tolerance, or unequal (NaN compares false either way)
template <typename T>
__device__ void outside(const T* out, const double* ref, unsigned long long n, double rtol,
                        double atol, int exact, unsigned long long* count) {
    unsigned long long bad = 0;
    for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n;
         i += (unsigned long long)gridDim.x * blockDim.x) {
        double o = value(out, i), r = ref[i];
        bool ok = exact ? (o == r) : (fabs(o - r) <= atol + rtol * fabs(r));
        bad += ok ? 0 : 1;
    }
    for (int step = 16; step > 0; step >>= 1)
        bad += __shfl_down_sync(0xffffffffu, bad, step);
    if ((threadIdx.x & 31) == 0 && bad)
        atomicAdd(count, bad);
}
extern "C" {
"""


assert set(C_TYPES) == set(DTYPES), "every bench dtype needs a comparison kernel"


def kernel_name(dtype: str) -> str:
    return f"outside_{dtype}"


def source() -> str:
    """The comparison kernels, one per bench dtype."""
    entries = "".join(
        f"__global__ void {kernel_name(d)}(const {c}* o, const double* r, unsigned long long n, "
        f"double rtol, double atol, int exact, unsigned long long* c) "
        f"{{ outside(o, r, n, rtol, atol, exact, c); }}\n"
        for d, c in C_TYPES.items())
    return SOURCE + entries + "}\n"


def compile_kernels(arch: str, nvcc: str | None = None, cache: Path | None = None) -> bytes | None:
    """The comparison kernels' cubin for `arch` (sm_90), built with the real
    nvcc once and cached by source, arch and nvcc binary; None where nvcc is
    missing or fails (the host check is then used)."""
    try:
        nvcc = nvcc or find_real_nvcc()
        stat = os.stat(nvcc)
    except (OSError, NvccNotFound):    # no nvcc here
        return None
    text = source()
    identity = f"{text}|{arch}|{os.path.realpath(nvcc)}|{stat.st_size}|{stat.st_mtime_ns}"
    key = hashlib.sha256(identity.encode())
    try:
        path = (cache or cache_folder()) / f"check-{key.hexdigest()[:20]}.cubin"
        if path.is_file():
            return path.read_bytes()
    except OSError:                   # no cache folder (a link in its place): compiled, not kept
        path = None
    with tempfile.TemporaryDirectory(prefix="nvcc-evo-check-") as folder:
        src, out = Path(folder) / "check.cu", Path(folder) / "check.cubin"
        src.write_text(text)
        try:
            command = [nvcc, "-cubin", f"-arch={arch}", "-O3", "-o", str(out), str(src)]
            done = subprocess.run(command, capture_output=True, text=True,
                                  stdin=subprocess.DEVNULL, timeout=300)
        except (OSError, subprocess.SubprocessError):
            return None
        if done.returncode != 0 or not out.is_file():
            return None
        cubin = out.read_bytes()
    try:
        if path is not None:
            folders(path.parent)
            replace_file(path, cubin)
    except OSError:
        pass                          # an unwritable cache: compiled again next time
    return cubin


class DeviceCheck:
    """Comparisons on one device: the references' float64 copies kept there
    (uploaded once each), the kernels loaded on first use."""

    def __init__(self, cuda: Any, arch: str) -> None:     # (cuda: pycuda.driver)
        self.cuda, self.arch = cuda, arch
        # pycuda's Module and DeviceAllocation (untyped), once loaded
        self.module: Any = None
        self.usable = True
        # key -> (host reference, {name: (copy, count)})
        self.kept: dict[str, tuple[dict, dict]] = {}
        self.count: Any = None

    def _load(self) -> bool:
        if self.module is None and self.usable:
            cubin = compile_kernels(self.arch)
            if cubin is None:
                self.usable = False
            else:
                self.module = self.cuda.module_from_buffer(cubin)
                self.count = self.cuda.mem_alloc(8)
        return self.module is not None

    def _on_device(self, key: str, reference: dict) -> dict | None:
        held = self.kept.get(key)
        if held is not None and held[0] is reference:
            return held[1]
        self.kept.pop(key, None)
        size = sum(a.nbytes for a in reference.values())
        held_bytes = sum(sum(a.nbytes for a in h.values()) for h, _ in self.kept.values())
        if size + held_bytes > KEPT_BYTES:
            self.kept.clear()
            if size > KEPT_BYTES:
                return None
        copies = {name: (self.cuda.to_device(np.ascontiguousarray(values, dtype=np.float64)),
                         values.size) for name, values in reference.items()}
        self.kept[key] = (reference, copies)
        return copies

    def outside(self, key: str, reference: dict, plan: BenchPlan, outputs: dict) -> int | None:
        """How many checked elements are wrong (outside tolerance, unequal or
        NaN) in the device arrays `outputs`; None where this cannot be
        answered on the device."""
        if not self._load():
            return None
        copies = self._on_device(key, reference)
        if copies is None:
            return None
        cuda, wrong, count = self.cuda, 0, np.zeros(1, dtype=np.uint64)
        for check in plan.checks:
            array = next(a for a in plan.arrays if a.name == check.name)
            copy, size = copies.get(check.name, (None, -1))
            if size != array.count:           # a reference of another shape: the host check says so
                return None
            cuda.memset_d8(self.count, 0, 8)
            kernel = self.module.get_function(kernel_name(array.dtype))
            kernel(outputs[check.name], copy, np.uint64(array.count), np.float64(check.rtol),
                   np.float64(check.atol), np.int32(check.exact), self.count,
                   grid=(min(GRID, max(1, -(-array.count // BLOCK))), 1), block=(BLOCK, 1, 1))
            cuda.memcpy_dtoh(count, self.count)
            wrong += int(count[0])
        return wrong
