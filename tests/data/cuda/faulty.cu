// saxpy with switches that break it, for the GPU backend's tests:
// BUG=1 writes a wrong value, CRASH=1 writes far outside y, SKIP=1 leaves
// every other element unwritten.
#ifndef BUG
#define BUG 0
#endif
#ifndef CRASH
#define CRASH 0
#endif
#ifndef SKIP
#define SKIP 0
#endif
#ifndef BLOCK
#define BLOCK 256
#endif

extern "C" __global__ void saxpy(int n, float a, const float* __restrict__ x, float* __restrict__ y)
{
    int i = blockIdx.x * BLOCK + threadIdx.x;
    if (SKIP && (i & 1)) return;
    if (CRASH && i == 0) y[-(1ll << 36)] = 1.0f;
    if (i < n) y[i] = a * x[i] + (BUG ? 2.0f : 1.0f) * y[i] * (BUG ? 1.5f : 1.0f);
}
