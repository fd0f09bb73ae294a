#include "params.h"
#define SCALE(v) (v)

extern "C" __global__ void mix(const float* __restrict__ x, float* __restrict__ y, int n)
{
    float acc[TERMS];
#pragma unroll
    for (int t = 0; t < TERMS; ++t) acc[t] = x[(threadIdx.x + t * 97) % n];
    for (int step = 0; step < n; ++step) {
#pragma unroll
        for (int t = 0; t < TERMS; ++t) acc[t] = fmaf(acc[t], acc[(t + 1) % TERMS], x[(step + t) % n]);
    }
    float sum = 0.0f;
#pragma unroll
    for (int t = 0; t < TERMS; ++t) sum += acc[t] * (t + 1);
    y[blockIdx.x * blockDim.x + threadIdx.x] = SCALE(sum);
}

void launch_mix(const float* x, float* y, int n) { mix<<<1, 32>>>(x, y, n); }
