#pragma once
namespace app {
template <int TILE> void gemm(const float *a, const float *b, float *c, int n);
void vector_ops(float *x, float *y, int n, int repeats);
float reduce(const float *x, int n);
}
