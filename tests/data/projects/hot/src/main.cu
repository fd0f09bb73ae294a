// The application: products, vector work, a sum; prints its own time.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>
#include "app.h"

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 1024, repeats = argc > 2 ? atoi(argv[2]) : 20;
    size_t bytes = size_t(n) * n * sizeof(float);
    std::vector<float> host(size_t(n) * n);
    for (size_t i = 0; i < host.size(); i++) host[i] = float(i % 17) / 17.0f;
    float *a, *b, *c;
    if (cudaMalloc(&a, bytes) != cudaSuccess || cudaMalloc(&b, bytes) != cudaSuccess ||
        cudaMalloc(&c, bytes) != cudaSuccess) {
        fprintf(stderr, "app: no GPU memory\n");
        return 2;
    }
    cudaMemcpy(a, host.data(), bytes, cudaMemcpyHostToDevice);
    cudaMemcpy(b, host.data(), bytes, cudaMemcpyHostToDevice);
    auto start = std::chrono::steady_clock::now();
    for (int r = 0; r < repeats; r++) {
        app::gemm<32>(a, b, c, n);
        if (r % 4 == 0) app::gemm<16>(a, b, c, n);
    }
    app::vector_ops(a, c, n * n, repeats);
    float sum = app::reduce(c, n * n);
    cudaError_t status = cudaDeviceSynchronize();
    double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    if (status != cudaSuccess) {
        fprintf(stderr, "app: %s\n", cudaGetErrorString(status));
        return 1;
    }
    printf("sum %.6g\ntime %.3f ms\n", sum, ms);
    return 0;
}
