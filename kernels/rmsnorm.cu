// RMSNorm of a [rows, cols] fp32 matrix: y = x / sqrt(mean(x^2) + eps) * w.
// One block per row; each thread reads VEC-wide chunks in a strided loop.
#ifndef BLOCK
#define BLOCK 256
#endif
#ifndef VEC
#define VEC 4
#endif

#include "block_reduce.cuh"

static_assert(VEC == 1 || VEC == 2 || VEC == 4, "VEC is 1, 2 or 4 floats");

extern "C" __global__ void __launch_bounds__(BLOCK)
rmsnorm(const float* __restrict__ x, const float* __restrict__ w, float* __restrict__ y,
        int rows, int cols, float eps)
{
    const int row = blockIdx.x;
    if (row >= rows) return;
    const float* in = x + (size_t)row * cols;
    float* out = y + (size_t)row * cols;
    float sum = 0.0f;
    for (int col = threadIdx.x * VEC; col < cols; col += BLOCK * VEC)
#pragma unroll
        for (int k = 0; k < VEC; ++k)
            if (col + k < cols) sum += in[col + k] * in[col + k];
    sum = block_reduce<BLOCK, Sum>(sum);
    const float scale = rsqrtf(sum / cols + eps);
    for (int col = threadIdx.x * VEC; col < cols; col += BLOCK * VEC)
#pragma unroll
        for (int k = 0; k < VEC; ++k)
            if (col + k < cols) out[col + k] = in[col + k] * scale * w[col + k];
}
