// saxpy with switches that break it, for the GPU backend's tests:
// BUG=1 writes a wrong value, CRASH=1 writes far outside y, SKIP=1 leaves
// every other element unwritten, SPIN=1 never ends (a loop on a flag no one sets:
// a deadlocked kernel, as a register cap under setmaxnreg's allocation makes one).
#ifndef BUG
#define BUG 0
#endif
#ifndef CRASH
#define CRASH 0
#endif
#ifndef SKIP
#define SKIP 0
#endif
#ifndef SPIN
#define SPIN 0
#endif
#ifndef BLOCK
#define BLOCK 256
#endif

__device__ int never_set = 0;

extern "C" __global__ void saxpy(int n, float a, const float* __restrict__ x, float* __restrict__ y)
{
    int i = blockIdx.x * BLOCK + threadIdx.x;
    if (SPIN)
        while (*(volatile int *)&never_set == 0) {}
    if (SKIP && (i & 1)) return;
    if (CRASH && i == 0) y[-(1ll << 36)] = 1.0f;
    if (i < n) y[i] = a * x[i] + (BUG ? 2.0f : 1.0f) * y[i] * (BUG ? 1.5f : 1.0f);
}
