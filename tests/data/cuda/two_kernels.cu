#ifndef MOVE
#define MOVE 0
#endif
// MOVE=1 moves work from the heavy kernel to the light one: fewer registers for the unit's worst kernel,
// more for the other.
template <int N> __device__ float work(const float *p, int i)
{
    float v[N];
#pragma unroll
    for (int j = 0; j < N; ++j) v[j] = p[i + j * 97];
    float s = 0.f;
#pragma unroll
    for (int j = 0; j < N; ++j) s += v[j] * v[(j * 7) % N];
    return s;
}
__global__ void heavy(const float *p, float *o) { o[threadIdx.x] = work<MOVE ? 24 : 64>(p, threadIdx.x); }
__global__ void light(const float *p, float *o) { o[threadIdx.x] = work<MOVE ? 24 : 4>(p, threadIdx.x); }
