"""A small PyTorch program with Triton kernels of its own, for `--hot` on a GPU.

One step of a transformer-like block over 2048 tokens of a 4096-wide hidden
state, in fp16: a layer norm, a projection (a grouped-tile matmul, fp32
accumulation), a row softmax, each a hand-written Triton kernel (one fixed
configuration: no autotuning), and a residual add by PyTorch's own kernel
(no recorded build reaches it). The step runs STEPS times in a loop; the
program prints its own figure, the mean time of a step (CUDA events around
the loop, after a checked warm-up step):

    python3 benchmarks/hot/torch_app.py [STEPS]      # time 0.2871 ms a step

A step whose outputs differ from PyTorch's exits 2 (before anything is timed).
"""
import sys
from pathlib import Path

import torch
import triton
import triton.language as tl

# the projection is the Triton benchmarks' grouped-tile matmul (benchmarks/triton/matmul.py), found beside
# this file where torch_h200.sh copies it, else in the repository
sys.path.append(str(Path(__file__).resolve().parent.parent / "triton"))
from matmul import matmul_kernel  # noqa: E402

TOKENS, WIDTH = 2048, 4096


@triton.jit
def layernorm_kernel(out, inp, weight, bias, n, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    x = tl.load(inp + row * n + cols, mask=cols < n, other=0.0).to(tl.float32)
    mean = tl.sum(x, axis=0) / n
    d = tl.where(cols < n, x - mean, 0.0)
    rstd = 1 / tl.sqrt(tl.sum(d * d, axis=0) / n + eps)
    y = d * rstd * tl.load(weight + cols, mask=cols < n) + tl.load(bias + cols, mask=cols < n)
    tl.store(out + row * n + cols, y.to(tl.float16), mask=cols < n)


@triton.jit
def softmax_kernel(out, inp, n, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    x = tl.load(inp + row * n + cols, mask=cols < n, other=-float("inf")).to(tl.float32)
    e = tl.exp(x - tl.max(x, axis=0))
    tl.store(out + row * n + cols, (e / tl.sum(e, axis=0)).to(tl.float16), mask=cols < n)


class Block:
    """The block's weights and buffers; `step` runs its four kernels on `x`, in place."""

    def __init__(self):
        torch.manual_seed(0)
        self.weight = torch.rand(WIDTH, device="cuda", dtype=torch.float16) + 0.5
        self.bias = torch.randn(WIDTH, device="cuda", dtype=torch.float16)
        self.project = torch.randn(WIDTH, WIDTH, device="cuda", dtype=torch.float16) / 64
        self.normed, self.scores, self.probs = (torch.empty(TOKENS, WIDTH, device="cuda", dtype=torch.float16)
                                                for _ in range(3))

    def step(self, x: torch.Tensor) -> None:
        block = triton.next_power_of_2(WIDTH)
        layernorm_kernel[(TOKENS,)](self.normed, x, self.weight, self.bias, WIDTH, 1e-5, BLOCK=block, num_warps=8)
        grid = (triton.cdiv(TOKENS, 128) * triton.cdiv(WIDTH, 128),)
        matmul_kernel[grid](self.normed, self.project, self.scores, TOKENS, WIDTH, WIDTH, BM=128, BN=128, BK=64,
                            GROUP=8, num_warps=8, num_stages=3)
        softmax_kernel[(TOKENS,)](self.probs, self.scores, WIDTH, BLOCK=block, num_warps=8)
        x.add_(self.probs)                  # (PyTorch's own kernel)


def checked(block: Block, x: torch.Tensor) -> None:
    """One step against PyTorch's own operations; a wrong answer exits 2."""
    start = x.clone()
    block.step(x)
    normed = torch.nn.functional.layer_norm(start.float(), (WIDTH,), block.weight.float(), block.bias.float(), 1e-5)
    scores = block.normed.float() @ block.project.float()
    probs = torch.softmax(block.scores.float(), dim=1)
    for name, got, want, atol in (("layernorm", block.normed, normed, 2e-2), ("matmul", block.scores, scores, 0.5),
                                  ("softmax", block.probs, probs, 1e-3)):
        if not torch.allclose(got.float(), want, atol=atol, rtol=0.01):
            print(f"{name}: wrong answer (max abs error {(got.float() - want).abs().max().item():.3g})")
            sys.exit(2)


def main() -> None:
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 200
    block = Block()
    x = torch.randn(TOKENS, WIDTH, device="cuda", dtype=torch.float16)
    checked(block, x)
    begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    begin.record()
    for _ in range(steps):
        block.step(x)
    end.record()
    torch.cuda.synchronize()
    print(f"time {begin.elapsed_time(end) / steps:.4f} ms a step ({steps} steps)")


if __name__ == "__main__":
    main()
