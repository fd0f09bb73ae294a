"""What the four Triton benchmarks share: one timing protocol and the line
nvcc-evo's command backend reads. `triton.testing.do_bench` times the kernel
with CUDA events, clearing a buffer larger than the L2 before each repetition,
and returns the median in ms; a wrong answer exits 2 (never timed)."""
import sys

import torch
import triton


def report(name: str, run, got, want, atol: float, rtol: float = 0.0) -> None:
    run()
    torch.cuda.synchronize()
    if not torch.allclose(got.float(), want.float(), atol=atol, rtol=rtol):
        worst = (got.float() - want.float()).abs().max().item()
        print(f"{name}: wrong answer (max abs error {worst:.3g})")
        sys.exit(2)
    ms = triton.testing.do_bench(run, warmup=50, rep=300, return_mode="median")
    print(f"{name}: time {ms:.5f} ms")
