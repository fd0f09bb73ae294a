// fp16 GEMM on the tensor cores (WMMA 16x16x16, fp32 accumulate):
// C[M,N] = A[M,K] * B[K,N], row-major, M, N, K multiples of BM, BN, BK * SPLIT_K.
// A block of WARPS_M x WARPS_N warps computes a BM x BN tile; each warp a
// (BM / WARPS_M) x (BN / WARPS_N) tile of 16x16 fragments. BK-deep slabs of
// A and B are staged in shared memory with 16-byte loads; rows are padded by
// 8 halves to spread shared-memory banks.
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

#define THREADS (WARPS_M * WARPS_N * 32)
#define WARP_M (BM / WARPS_M)
#define WARP_N (BN / WARPS_N)
#define PAD 8

static_assert(WARP_M % 16 == 0 && WARP_N % 16 == 0, "warp tiles are whole 16x16 fragments");
static_assert(BK % 16 == 0, "BK is whole k-steps of 16");
static_assert(BN % 8 == 0, "16-byte loads of B");

using namespace nvcuda;

extern "C" __global__ void __launch_bounds__(THREADS)
hgemm(const half* __restrict__ A, const half* __restrict__ B, float* __restrict__ C, int M, int N, int K)
{
    __shared__ __align__(16) half As[BM][BK + PAD];
    __shared__ __align__(16) half Bs[BK][BN + PAD];
    const int row0 = blockIdx.y * BM, col0 = blockIdx.x * BN;
    const int warp = threadIdx.x / 32;
    const int wm = warp / WARPS_N, wn = warp % WARPS_N;

    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[WARP_M / 16][WARP_N / 16];
#pragma unroll
    for (int i = 0; i < WARP_M / 16; ++i)
#pragma unroll
        for (int j = 0; j < WARP_N / 16; ++j) wmma::fill_fragment(acc[i][j], 0.0f);

    const int slice = K / SPLIT_K, k_begin = blockIdx.z * slice;
    for (int k0 = k_begin; k0 < k_begin + slice; k0 += BK) {
#pragma unroll
        for (int i = threadIdx.x; i < BM * BK / 8; i += THREADS) {
            int r = i / (BK / 8), c = i % (BK / 8) * 8;
            *reinterpret_cast<uint4*>(&As[r][c]) =
                *reinterpret_cast<const uint4*>(&A[(size_t)(row0 + r) * K + k0 + c]);
        }
#pragma unroll
        for (int i = threadIdx.x; i < BK * BN / 8; i += THREADS) {
            int r = i / (BN / 8), c = i % (BN / 8) * 8;
            *reinterpret_cast<uint4*>(&Bs[r][c]) =
                *reinterpret_cast<const uint4*>(&B[(size_t)(k0 + r) * N + col0 + c]);
        }
        __syncthreads();
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
        __syncthreads();
    }
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
