// RMSNorm of a [rows, cols] fp32 matrix: y = x / sqrt(mean(x^2) + eps) * w.
// One block per row; each thread reads VEC-wide chunks in a strided loop.
#ifndef BLOCK
#define BLOCK 256
#endif
#ifndef VEC
#define VEC 4
#endif

static_assert(VEC == 1 || VEC == 2 || VEC == 4, "VEC is 1, 2 or 4 floats");
static_assert(BLOCK % 32 == 0 && BLOCK <= 1024, "BLOCK is whole warps");

extern "C" __global__ void __launch_bounds__(BLOCK)
rmsnorm(const float* __restrict__ x, const float* __restrict__ w, float* __restrict__ y,
        int rows, int cols, float eps)
{
    __shared__ float partial[BLOCK / 32];
    const int row = blockIdx.x;
    if (row >= rows) return;
    const float* in = x + (size_t)row * cols;
    float* out = y + (size_t)row * cols;
    float sum = 0.0f;
    for (int col = threadIdx.x * VEC; col < cols; col += BLOCK * VEC)
#pragma unroll
        for (int k = 0; k < VEC; ++k)
            if (col + k < cols) sum += in[col + k] * in[col + k];
    for (int offset = 16; offset > 0; offset >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, offset);
    if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = sum;
    __syncthreads();
    // Every warp sums the partials itself, so every thread has the row total.
    const int lane = threadIdx.x % 32;
    sum = lane < BLOCK / 32 ? partial[lane] : 0.0f;
    for (int offset = 16; offset > 0; offset >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, offset);
    const float scale = rsqrtf(sum / cols + eps);
    for (int col = threadIdx.x * VEC; col < cols; col += BLOCK * VEC)
#pragma unroll
        for (int k = 0; k < VEC; ++k)
            if (col + k < cols) out[col + k] = in[col + k] * scale * w[col + k];
}
