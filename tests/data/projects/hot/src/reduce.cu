// A block-wise sum in a nested namespace, then the blocks' sums added.
#include "app.h"

namespace app {
namespace detail {
__global__ void reduce_sum(const float *x, float *out, int n) {
    __shared__ float part[256];
    float sum = 0.0f;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) sum += x[i];
    part[threadIdx.x] = sum;
    __syncthreads();
    for (int step = blockDim.x / 2; step > 0; step /= 2) {
        if (threadIdx.x < step) part[threadIdx.x] += part[threadIdx.x + step];
        __syncthreads();
    }
    if (threadIdx.x == 0) atomicAdd(out, part[0]);
}
}  // namespace detail

float reduce(const float *x, int n) {
    float *out, result = 0.0f;
    cudaMalloc(&out, sizeof(float));
    cudaMemset(out, 0, sizeof(float));
    detail::reduce_sum<<<256, 256>>>(x, out, n);
    cudaMemcpy(&result, out, sizeof(float), cudaMemcpyDeviceToHost);
    cudaFree(out);
    return result;
}
}  // namespace app
