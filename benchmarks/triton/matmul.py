"""fp16 matmul C = A @ B (fp32 accumulation) at an inference shape: a prefill
chunk of 512 tokens through a 4096 x 4096 projection. One fixed tile
configuration (no autotuning): the compiler's knobs are what varies."""
import torch
import triton
import triton.language as tl

from common import report


@triton.jit
def matmul_kernel(a, b, c, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GROUP: tl.constexpr):
    pid = tl.program_id(0)
    tiles_m, tiles_n = tl.cdiv(M, BM), tl.cdiv(N, BN)
    group = pid // (GROUP * tiles_n)          # tiles visited in groups of GROUP rows: better L2 reuse
    first_m = group * GROUP
    rows = min(tiles_m - first_m, GROUP)
    pid_m = first_m + (pid % (GROUP * tiles_n)) % rows
    pid_n = (pid % (GROUP * tiles_n)) // rows
    rm = pid_m * BM + tl.arange(0, BM)
    rn = pid_n * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    a_at = a + rm[:, None] * K + rk[None, :]
    b_at = b + rk[:, None] * N + rn[None, :]
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for _ in range(0, tl.cdiv(K, BK)):
        acc = tl.dot(tl.load(a_at), tl.load(b_at), acc)
        a_at += BK
        b_at += BK * N
    tl.store(c + rm[:, None] * N + rn[None, :], acc.to(tl.float16))


def main():
    M, N, K = 512, 4096, 4096
    torch.manual_seed(0)
    a = torch.randn(M, K, device="cuda", dtype=torch.float16)
    b = torch.randn(K, N, device="cuda", dtype=torch.float16)
    c = torch.empty(M, N, device="cuda", dtype=torch.float16)
    grid = (triton.cdiv(M, 128) * triton.cdiv(N, 128),)
    run = lambda: matmul_kernel[grid](a, b, c, M, N, K, BM=128, BN=128, BK=64, GROUP=8, num_warps=8, num_stages=3)
    report("matmul", run, c, a @ b, atol=0.5, rtol=0.01)


if __name__ == "__main__":
    main()
