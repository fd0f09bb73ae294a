// Tiled matrix products: one template, two instantiations, in a namespace.
#include "app.h"

// The same name and signature as vector.cu's: one symbol, internal to each unit.
static __global__ void scale(float *x, float by, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] *= by;
}

namespace app {

template <int TILE>
__global__ void __launch_bounds__(TILE * TILE) tile_gemm(const float *a, const float *b, float *c, int n) {
    __shared__ float as[TILE][TILE], bs[TILE][TILE];
    int row = blockIdx.y * TILE + threadIdx.y, col = blockIdx.x * TILE + threadIdx.x;
    float sum = 0.0f;
    for (int k = 0; k < n; k += TILE) {
        as[threadIdx.y][threadIdx.x] = row < n && k + threadIdx.x < n ? a[row * n + k + threadIdx.x] : 0.0f;
        bs[threadIdx.y][threadIdx.x] = col < n && k + threadIdx.y < n ? b[(k + threadIdx.y) * n + col] : 0.0f;
        __syncthreads();
        for (int i = 0; i < TILE; i++) sum += as[threadIdx.y][i] * bs[i][threadIdx.x];
        __syncthreads();
    }
    if (row < n && col < n) c[row * n + col] = sum;
}

template <int TILE>
void gemm(const float *a, const float *b, float *c, int n) {
    dim3 block(TILE, TILE), grid((n + TILE - 1) / TILE, (n + TILE - 1) / TILE);
    tile_gemm<TILE><<<grid, block>>>(a, b, c, n);
    scale<<<(n * n + 255) / 256, 256>>>(c, 0.5f, n * n);
}

template void gemm<16>(const float *, const float *, float *, int);
template void gemm<32>(const float *, const float *, float *, int);

}  // namespace app
