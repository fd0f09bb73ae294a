"""Triton kernels for the drop-in ptxas's tests: compiled for sm_90a (or
another compute capability: sm_100a is Triton's ptxas-blackwell's) without a
GPU (`python kernels.py NAME OUT.cubin [CAPABILITY]`); each run is a fresh
process, as Triton keeps its ptxas's `--version` answer for the life of one."""
import sys

import triton
import triton.language as tl
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource


@triton.jit
def matmul_kernel(a, b, c, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    pid_m, pid_n = tl.program_id(0), tl.program_id(1)
    rm = pid_m * BM + tl.arange(0, BM)
    rn = pid_n * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, K, BK):
        x = tl.load(a + rm[:, None] * K + (k + rk)[None, :])
        y = tl.load(b + (k + rk)[:, None] * N + rn[None, :])
        acc += tl.dot(x, y)
    tl.store(c + rm[:, None] * N + rn[None, :], acc.to(tl.float16))


@triton.jit
def softmax_kernel(out, inp, stride, n, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    x = tl.load(inp + row * stride + offs, mask=offs < n, other=-float("inf"))
    x = x - tl.max(x, axis=0)
    e = tl.exp(x)
    tl.store(out + row * stride + offs, e / tl.sum(e, axis=0), mask=offs < n)


KERNELS = {
    "matmul": (matmul_kernel, {"a": "*fp16", "b": "*fp16", "c": "*fp16", "M": "i32", "N": "i32", "K": "i32",
                               "BM": "constexpr", "BN": "constexpr", "BK": "constexpr"},
               {"BM": 128, "BN": 128, "BK": 64}),
    "matmul_small": (matmul_kernel, {"a": "*fp16", "b": "*fp16", "c": "*fp16", "M": "i32", "N": "i32", "K": "i32",
                                     "BM": "constexpr", "BN": "constexpr", "BK": "constexpr"},
                     {"BM": 64, "BN": 64, "BK": 32}),
    "softmax": (softmax_kernel, {"out": "*fp32", "inp": "*fp32", "stride": "i32", "n": "i32", "BLOCK": "constexpr"},
                {"BLOCK": 1024}),
}

def compile_kernel(name: str, capability: int = 90) -> bytes:
    fn, signature, constexprs = KERNELS[name]
    return triton.compile(ASTSource(fn, signature, constexprs), target=GPUTarget("cuda", capability, 32)).asm["cubin"]


if __name__ == "__main__":
    with open(sys.argv[2], "wb") as out:
        out.write(compile_kernel(sys.argv[1], int(sys.argv[3]) if len(sys.argv) > 3 else 90))
