// Spills at the default: 56 live accumulators under __launch_bounds__(1024) (64 registers).
// ptxas -O1 spills far less than the default -O3; retune tests must find that.
#ifndef TERMS
#define TERMS 56
#endif
extern "C" __global__ void __launch_bounds__(1024) mix(const float* __restrict__ x, float* __restrict__ y, int n)
{
    float acc[TERMS];
#pragma unroll
    for (int t = 0; t < TERMS; ++t) acc[t] = x[(threadIdx.x + t * 97) % n];
    for (int step = 0; step < n; ++step) {
#pragma unroll
        for (int t = 0; t < TERMS; ++t) acc[t] = fmaf(acc[t], acc[(t + 7) % TERMS], x[(step + t) % n]);
    }
    float sum = 0.0f;
#pragma unroll
    for (int t = 0; t < TERMS; ++t) sum += acc[t] * (t + 1);
    y[blockIdx.x * blockDim.x + threadIdx.x] = sum;
}
