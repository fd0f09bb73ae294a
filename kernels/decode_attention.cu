// Decode attention: one query per head against a KV cache of LEN positions,
// fp16 K and V, fp32 softmax and output. One block per head:
//   scores[t] = (q . K[t]) * scale,  p = softmax(scores),  out = sum_t p[t] V[t].
// Scores live in shared memory (LEN floats). For the weighted sum, the block
// splits into GROUPS = BLOCK / HEAD_DIM groups, each summing every GROUPS-th
// position for all HEAD_DIM outputs, then the groups add up.
#include <cuda_fp16.h>
#include "block_reduce.cuh"

#ifndef BLOCK
#define BLOCK 256
#endif
#ifndef HEAD_DIM
#define HEAD_DIM 128
#endif
#ifndef LEN
#define LEN 8192
#endif
#ifndef UNROLL
#define UNROLL 4
#endif

#define GROUPS (BLOCK / HEAD_DIM)
#define DO_PRAGMA(x) _Pragma(#x)
#define UNROLL_BY(n) DO_PRAGMA(unroll n)
static_assert(BLOCK % HEAD_DIM == 0 && BLOCK % 32 == 0, "whole groups of HEAD_DIM threads");
static_assert(HEAD_DIM % 8 == 0, "16-byte loads of K");

extern "C" __global__ void __launch_bounds__(BLOCK)
decode_attention(const half* __restrict__ q, const half* __restrict__ k, const half* __restrict__ v,
                 float* __restrict__ out, float scale)
{
    __shared__ float scores[LEN];
    __shared__ float qs[HEAD_DIM];
    __shared__ float partial[GROUPS][HEAD_DIM];
    const int head = blockIdx.x;
    const half* kh = k + (size_t)head * LEN * HEAD_DIM;
    const half* vh = v + (size_t)head * LEN * HEAD_DIM;
    for (int d = threadIdx.x; d < HEAD_DIM; d += BLOCK) qs[d] = __half2float(q[head * HEAD_DIM + d]);
    __syncthreads();

    float local_max = -INFINITY;
    for (int t = threadIdx.x; t < LEN; t += BLOCK) {
        const uint4* row = reinterpret_cast<const uint4*>(kh + (size_t)t * HEAD_DIM);
        float dot = 0.0f;
        UNROLL_BY(UNROLL)
        for (int c = 0; c < HEAD_DIM / 8; ++c) {
            uint4 packed = row[c];
            const half2* h = reinterpret_cast<const half2*>(&packed);
#pragma unroll
            for (int p = 0; p < 4; ++p) {
                float2 f = __half22float2(h[p]);
                dot = fmaf(f.x, qs[c * 8 + 2 * p], fmaf(f.y, qs[c * 8 + 2 * p + 1], dot));
            }
        }
        scores[t] = dot * scale;
        local_max = fmaxf(local_max, dot * scale);
    }
    const float top = block_reduce<BLOCK, Max>(local_max);
    float local_sum = 0.0f;
    for (int t = threadIdx.x; t < LEN; t += BLOCK) {
        float p = __expf(scores[t] - top);
        scores[t] = p;
        local_sum += p;
    }
    const float inverse = 1.0f / block_reduce<BLOCK, Sum>(local_sum);

    const int d = threadIdx.x % HEAD_DIM, group = threadIdx.x / HEAD_DIM;
    float acc = 0.0f;
    UNROLL_BY(UNROLL)
    for (int t = group; t < LEN; t += GROUPS) acc = fmaf(scores[t], __half2float(vh[(size_t)t * HEAD_DIM + d]), acc);
    partial[group][d] = acc;
    __syncthreads();
    if (group == 0) {
        float total = 0.0f;
#pragma unroll
        for (int g = 0; g < GROUPS; ++g) total += partial[g][d];
        out[head * HEAD_DIM + d] = total * inverse;
    }
}
