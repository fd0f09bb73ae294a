"""Flash-attention forward (fp16, online softmax in fp32, non-causal) at a
prefill shape: batch 4, 32 heads, 1024 tokens, head dim 128."""
import torch
import triton
import triton.language as tl

from common import report


@triton.jit
def attention_fwd(q, k, v, o, scale, seq, D: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr):
    block, head = tl.program_id(0), tl.program_id(1)
    base = head * seq * D
    rm, rd = block * BM + tl.arange(0, BM), tl.arange(0, D)
    qs = tl.load(q + base + rm[:, None] * D + rd[None, :])
    best = tl.full((BM,), -float("inf"), tl.float32)
    total = tl.zeros((BM,), tl.float32)
    acc = tl.zeros((BM, D), tl.float32)
    for start in range(0, seq, BN):
        rn = start + tl.arange(0, BN)
        ks = tl.load(k + base + rn[None, :] * D + rd[:, None])
        s = tl.dot(qs, ks) * scale
        new_best = tl.maximum(best, tl.max(s, axis=1))
        p = tl.exp(s - new_best[:, None])
        keep = tl.exp(best - new_best)
        total = total * keep + tl.sum(p, axis=1)
        acc = acc * keep[:, None] + tl.dot(p.to(tl.float16), tl.load(v + base + rn[:, None] * D + rd[None, :]))
        best = new_best
    tl.store(o + base + rm[:, None] * D + rd[None, :], (acc / total[:, None]).to(tl.float16))


def main():
    batch, heads, seq, d = 4, 32, 1024, 128
    torch.manual_seed(0)
    q, k, v = (torch.randn(batch * heads, seq, d, device="cuda", dtype=torch.float16) for _ in range(3))
    o = torch.empty_like(q)
    scale = d ** -0.5
    run = lambda: attention_fwd[(seq // 128, batch * heads)](q, k, v, o, scale, seq, D=d, BM=128, BN=64,
                                                             num_warps=8, num_stages=2)
    want = torch.nn.functional.scaled_dot_product_attention(q.float(), k.float(), v.float())
    report("attention", run, o, want, atol=2e-2)


if __name__ == "__main__":
    main()
