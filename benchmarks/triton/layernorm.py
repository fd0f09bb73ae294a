"""Layer norm forward (fp16, fp32 statistics) over 4096 tokens of a 4096-wide
hidden state, with weight and bias. One program per row, two passes over it."""
import torch
import triton
import triton.language as tl

from common import report


@triton.jit
def layernorm_kernel(out, inp, weight, bias, stride, n, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    x_at, y_at = inp + row * stride, out + row * stride
    total = tl.zeros((BLOCK,), dtype=tl.float32)
    for start in range(0, n, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        total += tl.load(x_at + cols, mask=cols < n, other=0.0).to(tl.float32)
    mean = tl.sum(total, axis=0) / n
    squares = tl.zeros((BLOCK,), dtype=tl.float32)
    for start in range(0, n, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        d = tl.where(cols < n, tl.load(x_at + cols, mask=cols < n, other=0.0).to(tl.float32) - mean, 0.0)
        squares += d * d
    rstd = 1 / tl.sqrt(tl.sum(squares, axis=0) / n + eps)
    for start in range(0, n, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        m = cols < n
        x = tl.load(x_at + cols, mask=m, other=0.0).to(tl.float32)
        y = (x - mean) * rstd * tl.load(weight + cols, mask=m) + tl.load(bias + cols, mask=m)
        tl.store(y_at + cols, y.to(tl.float16), mask=m)


def main():
    rows, n = 4096, 4096
    torch.manual_seed(0)
    x = torch.randn(rows, n, device="cuda", dtype=torch.float16)
    w = torch.rand(n, device="cuda", dtype=torch.float16) + 0.5
    b = torch.randn(n, device="cuda", dtype=torch.float16)
    y = torch.empty_like(x)
    run = lambda: layernorm_kernel[(rows,)](y, x, w, b, n, n, 1e-5, BLOCK=1024, num_warps=8)
    want = torch.nn.functional.layer_norm(x.float(), (n,), w.float(), b.float(), 1e-5)
    report("layernorm", run, y, want, atol=2e-2)


if __name__ == "__main__":
    main()
