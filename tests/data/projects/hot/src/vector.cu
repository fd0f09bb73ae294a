// Vector kernels: extern "C", a lambda through a template, and a static
// kernel whose name gemm.cu uses too.
#include "app.h"

extern "C" __global__ void saxpy(int n, float a, const float *x, float *y) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}

template <typename F>
__global__ void for_each(int n, F f) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) f(i);
}

static __global__ void scale(float *x, float by, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = x[i] * by + 1.0f;
}

namespace app {
void vector_ops(float *x, float *y, int n, int repeats) {
    int blocks = (n + 255) / 256;
    for (int r = 0; r < repeats; r++) {
        saxpy<<<blocks, 256>>>(n, 2.0f, x, y);
        for_each<<<blocks, 256>>>(n, [=] __device__(int i) { y[i] = y[i] * 0.5f + x[i]; });
        scale<<<blocks, 256>>>(y, 0.25f, n);
    }
}
}  // namespace app
