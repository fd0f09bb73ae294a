// Row-wise softmax of a [rows, cols] fp32 matrix: one block per row.
// Each thread keeps VEC-wide chunks in registers; a row longer than
// BLOCK * VEC * ITEMS is written as NaN (a tuning candidate that is too small
// fails the check instead of computing half a row),
// finds the row max and the sum of exponentials with warp shuffles, and
// writes exp(x - max) / sum. Memory-bound: one read and one write per element.
#ifndef BLOCK
#define BLOCK 256
#endif
#ifndef VEC
#define VEC 4
#endif
#ifndef ITEMS
#define ITEMS 4
#endif

static_assert(VEC == 1 || VEC == 2 || VEC == 4, "VEC is 1, 2 or 4 floats");

#include "block_reduce.cuh"

template <int N> struct Vec;
template <> struct Vec<1> { using T = float; };
template <> struct Vec<2> { using T = float2; };
template <> struct Vec<4> { using T = float4; };

extern "C" __global__ void __launch_bounds__(BLOCK)
softmax(const float* __restrict__ x, float* __restrict__ y, int rows, int cols)
{
    using V = typename Vec<VEC>::T;
    const int row = blockIdx.x;
    if (row >= rows) return;
    const float* in = x + (size_t)row * cols;
    float* out = y + (size_t)row * cols;
    if (cols > BLOCK * VEC * ITEMS) {        // the row does not fit this tiling: fail loudly, not silently
        for (int col = threadIdx.x; col < cols; col += BLOCK) out[col] = __int_as_float(0x7fc00000);
        return;
    }
    float values[ITEMS][VEC];
    float local_max = -INFINITY;
#pragma unroll
    for (int item = 0; item < ITEMS; ++item) {
        int col = (item * BLOCK + threadIdx.x) * VEC;
        if (col + VEC <= cols) {
            V v = *reinterpret_cast<const V*>(in + col);
            const float* f = reinterpret_cast<const float*>(&v);
#pragma unroll
            for (int k = 0; k < VEC; ++k) values[item][k] = f[k];
        } else {
#pragma unroll
            for (int k = 0; k < VEC; ++k) values[item][k] = col + k < cols ? in[col + k] : -INFINITY;
        }
#pragma unroll
        for (int k = 0; k < VEC; ++k) local_max = fmaxf(local_max, values[item][k]);
    }
    const float row_max = block_reduce<BLOCK, Max>(local_max);
    float local_sum = 0.0f;
#pragma unroll
    for (int item = 0; item < ITEMS; ++item)
#pragma unroll
        for (int k = 0; k < VEC; ++k) {
            values[item][k] = __expf(values[item][k] - row_max);
            local_sum += values[item][k];
        }
    const float inverse = 1.0f / block_reduce<BLOCK, Sum>(local_sum);
#pragma unroll
    for (int item = 0; item < ITEMS; ++item) {
        int col = (item * BLOCK + threadIdx.x) * VEC;
#pragma unroll
        for (int k = 0; k < VEC; ++k)
            if (col + k < cols) out[col + k] = values[item][k] * inverse;
    }
}
