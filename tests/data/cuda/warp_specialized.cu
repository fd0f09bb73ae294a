// A warp-specialized kernel as CUTLASS 3.x's Hopper GEMMs and FlashAttention-3 are: 384 threads, one
// producer warp group that gives registers back (setmaxnreg.dec 40) and two consumer groups that take more
// (setmaxnreg.inc 232): 128 x 40 + 256 x 232 = 64,512 registers, the block's launch allocation at ptxas's
// 168 a thread (sm_90a). Beside it, a small kernel that a register cap does lower.
__global__ void __launch_bounds__(384, 1) ws_kernel(const float* __restrict__ a, float* __restrict__ out, int n)
{
    __shared__ float tile[256];
    const int group = threadIdx.x / 128;
    if (group == 0) {
        asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n" ::: "memory");
        for (int i = threadIdx.x; i < 256; i += 128) tile[i] = a[blockIdx.x * 256 + i];
        __syncthreads();
    } else {
        asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n" ::: "memory");
        __syncthreads();
        float acc[32];
#pragma unroll
        for (int j = 0; j < 32; ++j) acc[j] = tile[(threadIdx.x + j) % 256] * a[(j * 7 + threadIdx.x) % n];
        float s = 0.f;
#pragma unroll
        for (int j = 0; j < 32; ++j) s += acc[j] * acc[(j + 3) % 32];
        out[blockIdx.x * 256 + threadIdx.x - 128] = s;
    }
}

__global__ void reference_kernel(const float* a, float* out, int n)
{
    float v[16];
#pragma unroll
    for (int j = 0; j < 16; ++j) v[j] = a[(threadIdx.x * 16 + j) % n];
    float s = 0.f;
#pragma unroll
    for (int j = 0; j < 16; ++j) s += v[j] * v[(j * 5) % 16];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = s;
}
