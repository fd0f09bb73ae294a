// Sum of n fp32 values in double precision: each block reduces ITEMS * BLOCK
// elements per step in a grid-stride loop, then one double atomic per block.
#ifndef BLOCK
#define BLOCK 256
#endif
#ifndef ITEMS
#define ITEMS 4
#endif
#ifndef WAVES
#define WAVES 4           // blocks per SM; the bench's grid is 132 * WAVES on an H200
#endif

static_assert(BLOCK % 32 == 0 && BLOCK <= 1024, "BLOCK is whole warps");

extern "C" __global__ void __launch_bounds__(BLOCK)
reduce_sum(const float* __restrict__ x, double* __restrict__ total, long long n)
{
    __shared__ double partial[BLOCK / 32];
    double sum = 0.0;
    for (long long base = (long long)blockIdx.x * BLOCK * ITEMS; base < n;
         base += (long long)gridDim.x * BLOCK * ITEMS) {
#pragma unroll
        for (int item = 0; item < ITEMS; ++item) {
            long long i = base + item * BLOCK + threadIdx.x;
            if (i < n) sum += x[i];
        }
    }
    for (int offset = 16; offset > 0; offset >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, offset);
    if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = sum;
    __syncthreads();
    if (threadIdx.x < 32) {
        sum = threadIdx.x < BLOCK / 32 ? partial[threadIdx.x] : 0.0;
        for (int offset = 16; offset > 0; offset >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, offset);
        if (threadIdx.x == 0) atomicAdd(total, sum);
    }
}
