// Flash-attention forward (FlashAttention-2 style) on the tensor cores:
//   O = softmax(Q K^T * scale, causal or not) V
// for BH = batch x heads independent heads of L positions and HEAD_DIM
// dimensions; Q, K, V and O fp16, row-major [BH][L][HEAD_DIM]; softmax in fp32.
// A block takes BQ = 16 * WARPS query rows, each warp 16 of them, with its Q
// fragments in registers. K and V go through shared memory in tiles of BKV
// positions. S = Q K^T and O += P V are mma.sync m16n8k16 (fp16 in, fp32
// accumulate); the online softmax rescales O in registers, and P passes from
// the S accumulators to the A operand of the second product without leaving
// registers. L must be a multiple of BQ and of BKV.
#include <cuda_fp16.h>

#ifndef HEAD_DIM
#define HEAD_DIM 128
#endif
#ifndef WARPS
#define WARPS 4
#endif
#ifndef BKV
#define BKV 64
#endif

#define BQ (16 * WARPS)
#define THREADS (32 * WARPS)
#define PAD 8          // halves per shared row: rows land on different banks
static_assert(HEAD_DIM % 16 == 0 && BKV % 16 == 0, "whole m16n8k16 steps");

// C (16x8, fp32) += A (16x16, fp16, row) * B (16x8, fp16, col).
// Thread lane = 4 * g + t holds A rows g and g + 8, columns 2t, 2t+1 (+8);
// B column g, rows 2t, 2t+1 (+8); C rows g and g + 8, columns 2t, 2t+1.
__device__ __forceinline__ void mma_16816(float* c, const unsigned* a, unsigned b0, unsigned b1)
{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
                 "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ unsigned pack_floats(float low, float high)
{
    __half2 h = __floats2half2_rn(low, high);
    return *reinterpret_cast<unsigned*>(&h);
}

__device__ __forceinline__ unsigned pack_halves(half low, half high)
{
    __half2 h = __halves2half2(low, high);
    return *reinterpret_cast<unsigned*>(&h);
}

__device__ __forceinline__ float quad_max(float v)
{
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
    return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}

__device__ __forceinline__ float quad_sum(float v)
{
    v += __shfl_xor_sync(0xffffffffu, v, 1);
    return v + __shfl_xor_sync(0xffffffffu, v, 2);
}

extern "C" __global__ void __launch_bounds__(THREADS)
flash_attention(const half* __restrict__ Q, const half* __restrict__ K, const half* __restrict__ V,
                half* __restrict__ O, int L, float scale, int causal)
{
    __shared__ __align__(16) half Ks[BKV][HEAD_DIM + PAD];
    __shared__ __align__(16) half Vs[BKV][HEAD_DIM + PAD];
    // Causal: the last query blocks have the most work; start them first.
    const int q0 = (causal ? gridDim.x - 1 - blockIdx.x : blockIdx.x) * BQ;
    const size_t head = (size_t)blockIdx.y * L * HEAD_DIM;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    const int row[2] = {q0 + warp * 16 + g, q0 + warp * 16 + g + 8};

    unsigned qa[HEAD_DIM / 16][4];
#pragma unroll
    for (int kk = 0; kk < HEAD_DIM / 16; ++kk)
#pragma unroll
        for (int r = 0; r < 4; ++r)
            qa[kk][r] = *reinterpret_cast<const unsigned*>(
                &Q[head + (size_t)row[r % 2] * HEAD_DIM + kk * 16 + 2 * t + 8 * (r / 2)]);

    float o[HEAD_DIM / 8][4];
#pragma unroll
    for (int n = 0; n < HEAD_DIM / 8; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
    float top[2] = {-INFINITY, -INFINITY}, total[2] = {0.0f, 0.0f};   // running max (log2 units), partial sums
    const float to_log2 = scale * 1.4426950408889634f;
    const int kv_end = causal ? min(L, q0 + BQ) : L;

    for (int k0 = 0; k0 < kv_end; k0 += BKV) {
        __syncthreads();                                   // the previous tile is consumed
        for (int i = threadIdx.x; i < BKV * HEAD_DIM / 8; i += THREADS) {
            const int r = i / (HEAD_DIM / 8), c = i % (HEAD_DIM / 8) * 8;
            const size_t at = head + (size_t)(k0 + r) * HEAD_DIM + c;
            *reinterpret_cast<uint4*>(&Ks[r][c]) = *reinterpret_cast<const uint4*>(&K[at]);
            *reinterpret_cast<uint4*>(&Vs[r][c]) = *reinterpret_cast<const uint4*>(&V[at]);
        }
        __syncthreads();

        float s[BKV / 8][4];
#pragma unroll
        for (int j = 0; j < BKV / 8; ++j) {
            s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.0f;
#pragma unroll
            for (int kk = 0; kk < HEAD_DIM / 16; ++kk)
                mma_16816(s[j], qa[kk], *reinterpret_cast<const unsigned*>(&Ks[8 * j + g][kk * 16 + 2 * t]),
                          *reinterpret_cast<const unsigned*>(&Ks[8 * j + g][kk * 16 + 2 * t + 8]));
        }

        float tile_top[2] = {-INFINITY, -INFINITY};
#pragma unroll
        for (int j = 0; j < BKV / 8; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int key = k0 + 8 * j + 2 * t + (e & 1);
                s[j][e] = causal && key > row[e / 2] ? -INFINITY : s[j][e] * to_log2;
                tile_top[e / 2] = fmaxf(tile_top[e / 2], s[j][e]);
            }
        float alpha[2], base[2];
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const float next = fmaxf(top[h], quad_max(tile_top[h]));
            base[h] = next == -INFINITY ? 0.0f : next;       // a row with nothing visible yet
            alpha[h] = exp2f(top[h] - base[h]);
            top[h] = next;
            total[h] *= alpha[h];
        }
#pragma unroll
        for (int j = 0; j < BKV / 8; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                s[j][e] = exp2f(s[j][e] - base[e / 2]);
                total[e / 2] += s[j][e];
            }
#pragma unroll
        for (int n = 0; n < HEAD_DIM / 8; ++n) {
            o[n][0] *= alpha[0]; o[n][1] *= alpha[0];
            o[n][2] *= alpha[1]; o[n][3] *= alpha[1];
        }

#pragma unroll
        for (int kk = 0; kk < BKV / 16; ++kk) {
            // P's C layout (two 16x8 tiles) is the A layout of a 16x16 step.
            const unsigned pa[4] = {pack_floats(s[2 * kk][0], s[2 * kk][1]), pack_floats(s[2 * kk][2], s[2 * kk][3]),
                                    pack_floats(s[2 * kk + 1][0], s[2 * kk + 1][1]),
                                    pack_floats(s[2 * kk + 1][2], s[2 * kk + 1][3])};
            const int p = kk * 16 + 2 * t;
#pragma unroll
            for (int n = 0; n < HEAD_DIM / 8; ++n) {
                const int d = 8 * n + g;
                mma_16816(o[n], pa, pack_halves(Vs[p][d], Vs[p + 1][d]), pack_halves(Vs[p + 8][d], Vs[p + 9][d]));
            }
        }
    }

#pragma unroll
    for (int h = 0; h < 2; ++h) {
        const float inverse = 1.0f / quad_sum(total[h]);
        half* out = O + head + (size_t)row[h] * HEAD_DIM + 2 * t;
#pragma unroll
        for (int n = 0; n < HEAD_DIM / 8; ++n)
            *reinterpret_cast<__half2*>(out + 8 * n) = __floats2half2_rn(o[n][2 * h] * inverse, o[n][2 * h + 1] * inverse);
    }
}
