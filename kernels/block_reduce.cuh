// Block-wide reductions of one float per thread, for blocks of whole warps.
// Every thread gets the result: each warp reduces the per-warp partials
// itself, so no broadcast step is needed. Shared by softmax.cu, rmsnorm.cu
// and decode_attention.cu.
#pragma once

struct Sum {
    static __device__ __forceinline__ float identity() { return 0.0f; }
    static __device__ __forceinline__ float apply(float a, float b) { return a + b; }
};
struct Max {
    static __device__ __forceinline__ float identity() { return -INFINITY; }
    static __device__ __forceinline__ float apply(float a, float b) { return fmaxf(a, b); }
};

template <class Op>
__device__ __forceinline__ float warp_reduce(float v)
{
    for (int offset = 16; offset > 0; offset >>= 1) v = Op::apply(v, __shfl_xor_sync(0xffffffffu, v, offset));
    return v;
}

// THREADS is the block size (a multiple of 32, at most 1024). Ends with a
// barrier, so a second call may follow at once.
template <int THREADS, class Op>
__device__ __forceinline__ float block_reduce(float v)
{
    static_assert(THREADS % 32 == 0 && THREADS <= 1024, "the block is whole warps");
    __shared__ float partial[THREADS / 32];
    const int lane = threadIdx.x % 32;
    v = warp_reduce<Op>(v);
    if (lane == 0) partial[threadIdx.x / 32] = v;
    __syncthreads();
    v = warp_reduce<Op>(lane < THREADS / 32 ? partial[lane] : Op::identity());
    __syncthreads();
    return v;
}
