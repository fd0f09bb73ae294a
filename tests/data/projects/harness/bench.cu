// A kernel benchmark with its own harness, the way llm.c's dev/cuda ones are
// written: main() checks the kernel against a CPU reference, then prints one
// time per block size. nvcc-evo tunes it through the command backend (see
// nvcc-evo.acf): nothing here knows about nvcc-evo.
//
// The kernel maps each x to x / sqrt(x*x + 1), the inverse square root by
// NEWTON_STEPS Newton steps from a rough guess: 5 already reach float
// precision, so the source's 32 is a cost a search can find.
//
// Without a GPU the same function runs on the host and its time is printed
// (`host | time ... ms`), so the example also runs on a machine without one.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <cuda_runtime.h>

#ifndef NEWTON_STEPS
#define NEWTON_STEPS 32
#endif

__host__ __device__ inline float squash(float x) {
    float v = x * x + 1.0f, y = 0.8f;            // v in [1, 2]: 0.8 is close to 1/sqrt(v)
    for (int i = 0; i < NEWTON_STEPS; i++) {
        y = y * (1.5f - 0.5f * v * y * y);
    }
    return x * y;
}

__global__ void squash_kernel(float* out, const float* in, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = squash(in[i]);
}

static bool matches(const float* got, const float* in, int n) {
    for (int i = 0; i < n; i++) {
        float want = in[i] / sqrtf(in[i] * in[i] + 1.0f);
        if (fabsf(got[i] - want) > 1e-5f + 1e-5f * fabsf(want)) {
            printf("Mismatch at %d: CPU_ref %f vs %f\n", i, want, got[i]);
            return false;
        }
    }
    return true;
}

static int on_the_host(const std::vector<float>& in, int repeats) {
    std::vector<float> out(in.size());
    double best = 1e30;
    for (int r = 0; r < repeats; r++) {
        auto start = std::chrono::steady_clock::now();
        for (size_t i = 0; i < in.size(); i++) out[i] = squash(in[i]);
        double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
        best = ms < best ? ms : best;
    }
    if (!matches(out.data(), in.data(), (int)in.size())) return 1;
    printf("all results match\nhost | time %.4f ms\n", best);
    return 0;
}

int main(int argc, char** argv) {
    int repeats = argc > 1 ? atoi(argv[1]) : 20;  // fewer while searching, more to confirm
    const int n = 1 << 22;
    std::vector<float> in(n);
    srand(0);
    for (int i = 0; i < n; i++) in[i] = 2.0f * rand() / RAND_MAX - 1.0f;
    int devices = 0;
    if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
        return on_the_host(std::vector<float>(in.begin(), in.begin() + n / 16), repeats);
    }
    float *d_in, *d_out;
    cudaMalloc(&d_in, n * sizeof(float));
    cudaMalloc(&d_out, n * sizeof(float));
    cudaMemcpy(d_in, in.data(), n * sizeof(float), cudaMemcpyHostToDevice);
    std::vector<float> out(n);
    const int block_sizes[] = {128, 256, 512, 1024};
    for (int block : block_sizes) {
        squash_kernel<<<(n + block - 1) / block, block>>>(d_out, d_in, n);
        cudaMemcpy(out.data(), d_out, n * sizeof(float), cudaMemcpyDeviceToHost);
        if (!matches(out.data(), in.data(), n)) return 1;
    }
    printf("all results match\n");
    cudaEvent_t start, stop;
    cudaEventCreate(&start);
    cudaEventCreate(&stop);
    for (int block : block_sizes) {
        cudaEventRecord(start);
        for (int r = 0; r < repeats; r++) squash_kernel<<<(n + block - 1) / block, block>>>(d_out, d_in, n);
        cudaEventRecord(stop);
        cudaEventSynchronize(stop);
        float ms = 0;
        cudaEventElapsedTime(&ms, start, stop);
        printf("block_size %4d | time %.4f ms\n", block, ms / repeats);
    }
    return 0;
}
