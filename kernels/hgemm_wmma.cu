// fp16 GEMM on the tensor cores (WMMA 16x16x16, fp32 accumulate):
// C[M,N] = A[M,K] * B[K,N], row-major, M, N, K multiples of BM, BN, BK * SPLIT_K.
// A block of WARPS_M x WARPS_N warps computes a BM x BN tile; each warp a
// (BM / WARPS_M) x (BN / WARPS_N) tile of 16x16 fragments. BK-deep slabs of
// A and B are staged in shared memory with 16-byte loads; rows are padded by
// 8 halves to spread shared-memory banks.
// Pipeline depth: with STAGES > 1, slabs go through a ring of STAGES shared
// buffers by cp.async, STAGES - 1 of them in flight while one is multiplied
// (all STAGES must fit in 48 KB of static shared memory).
// Split-K (decode shapes, few rows): SPLIT_K blocks (grid z) each take a
// K / SPLIT_K slice and add their partial tile into C, which must start at
// zero; with SPLIT_K = 1 the tile is stored.
#include <cuda_fp16.h>
#include <mma.h>

#ifndef BM
#define BM 128
#endif
#ifndef BN
#define BN 128
#endif
#ifndef BK
#define BK 32
#endif
#ifndef WARPS_M
#define WARPS_M 2
#endif
#ifndef WARPS_N
#define WARPS_N 4
#endif
#ifndef SPLIT_K
#define SPLIT_K 1
#endif
#ifndef STAGES
#define STAGES 1
#endif

#define THREADS (WARPS_M * WARPS_N * 32)
#define WARP_M (BM / WARPS_M)
#define WARP_N (BN / WARPS_N)
#define PAD 8

static_assert(WARP_M % 16 == 0 && WARP_N % 16 == 0, "warp tiles are whole 16x16 fragments");
static_assert(BK % 16 == 0, "BK is whole k-steps of 16");
static_assert(BN % 8 == 0, "16-byte loads of B");

using namespace nvcuda;

typedef half ATile[BM][BK + PAD];
typedef half BTile[BK][BN + PAD];
typedef wmma::fragment<wmma::accumulator, 16, 16, 16, float> Acc;

// One BK-deep slab: each warp multiplies its rows of A by its columns of B.
__device__ __forceinline__ void mma_slab(Acc (&acc)[WARP_M / 16][WARP_N / 16], const ATile& As, const BTile& Bs,
                                         int wm, int wn)
{
#pragma unroll
    for (int kk = 0; kk < BK; kk += 16) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, half, wmma::row_major> a[WARP_M / 16];
        wmma::fragment<wmma::matrix_b, 16, 16, 16, half, wmma::row_major> b[WARP_N / 16];
#pragma unroll
        for (int i = 0; i < WARP_M / 16; ++i)
            wmma::load_matrix_sync(a[i], &As[wm * WARP_M + i * 16][kk], BK + PAD);
#pragma unroll
        for (int j = 0; j < WARP_N / 16; ++j)
            wmma::load_matrix_sync(b[j], &Bs[kk][wn * WARP_N + j * 16], BN + PAD);
#pragma unroll
        for (int i = 0; i < WARP_M / 16; ++i)
#pragma unroll
            for (int j = 0; j < WARP_N / 16; ++j) wmma::mma_sync(acc[i][j], a[i], b[j], acc[i][j]);
    }
}

// 16 bytes global -> shared: a plain copy, or cp.async (bypassing L1 and
// registers) when slabs are pipelined.
__device__ __forceinline__ void copy16(half* shared, const half* global)
{
#if STAGES > 1
    const unsigned address = static_cast<unsigned>(__cvta_generic_to_shared(shared));
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(address), "l"(global));
#else
    *reinterpret_cast<uint4*>(shared) = *reinterpret_cast<const uint4*>(global);
#endif
}

__device__ __forceinline__ void load_slab(ATile& As, BTile& Bs, const half* __restrict__ A, const half* __restrict__ B,
                                          int row0, int col0, int k0, int N, int K)
{
#pragma unroll
    for (int i = threadIdx.x; i < BM * BK / 8; i += THREADS) {
        const int r = i / (BK / 8), c = i % (BK / 8) * 8;
        copy16(&As[r][c], &A[(size_t)(row0 + r) * K + k0 + c]);
    }
#pragma unroll
    for (int i = threadIdx.x; i < BK * BN / 8; i += THREADS) {
        const int r = i / (BN / 8), c = i % (BN / 8) * 8;
        copy16(&Bs[r][c], &B[(size_t)(k0 + r) * N + col0 + c]);
    }
}

extern "C" __global__ void __launch_bounds__(THREADS)
hgemm(const half* __restrict__ A, const half* __restrict__ B, float* __restrict__ C, int M, int N, int K)
{
    __shared__ __align__(16) ATile As[STAGES];
    __shared__ __align__(16) BTile Bs[STAGES];
    const int row0 = blockIdx.y * BM, col0 = blockIdx.x * BN;
    const int warp = threadIdx.x / 32;
    const int wm = warp / WARPS_N, wn = warp % WARPS_N;

    Acc acc[WARP_M / 16][WARP_N / 16];
#pragma unroll
    for (int i = 0; i < WARP_M / 16; ++i)
#pragma unroll
        for (int j = 0; j < WARP_N / 16; ++j) wmma::fill_fragment(acc[i][j], 0.0f);

    const int slice = K / SPLIT_K, k_begin = blockIdx.z * slice, slabs = slice / BK;
#if STAGES > 1
    // A ring of STAGES slabs: while slab t is multiplied, slabs t+1 .. t+STAGES-1
    // are in flight. One commit group per slab (empty past the end), so that
    // "at most STAGES-2 groups pending" always means slab t has landed.
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
        if (s < slabs) load_slab(As[s], Bs[s], A, B, row0, col0, k_begin + s * BK, N, K);
        asm volatile("cp.async.commit_group;\n" ::);
    }
    for (int t = 0; t < slabs; ++t) {
        asm volatile("cp.async.wait_group %0;\n" ::"n"(STAGES - 2));
        __syncthreads();            // slab t visible to all; slab t-1's stage free again
        const int next = t + STAGES - 1;
        if (next < slabs) load_slab(As[next % STAGES], Bs[next % STAGES], A, B, row0, col0, k_begin + next * BK, N, K);
        asm volatile("cp.async.commit_group;\n" ::);
        mma_slab(acc, As[t % STAGES], Bs[t % STAGES], wm, wn);
    }
    asm volatile("cp.async.wait_group 0;\n" ::);
#else
    for (int t = 0; t < slabs; ++t) {
        load_slab(As[0], Bs[0], A, B, row0, col0, k_begin + t * BK, N, K);
        __syncthreads();
        mma_slab(acc, As[0], Bs[0], wm, wn);
        __syncthreads();
    }
#endif
#if SPLIT_K > 1
    __shared__ __align__(16) float partial[THREADS / 32][16 * 16];
    float* mine = partial[warp];
#endif
#pragma unroll
    for (int i = 0; i < WARP_M / 16; ++i)
#pragma unroll
        for (int j = 0; j < WARP_N / 16; ++j) {
            float* out = C + (size_t)(row0 + wm * WARP_M + i * 16) * N + col0 + wn * WARP_N + j * 16;
#if SPLIT_K > 1
            wmma::store_matrix_sync(mine, acc[i][j], 16, wmma::mem_row_major);
            __syncwarp();
            for (int e = threadIdx.x % 32; e < 16 * 16; e += 32) atomicAdd(out + (size_t)(e / 16) * N + e % 16, mine[e]);
            __syncwarp();
#else
            wmma::store_matrix_sync(out, acc[i][j], N, wmma::mem_row_major);
#endif
        }
}
