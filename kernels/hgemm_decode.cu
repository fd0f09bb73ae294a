// The tensor-core GEMM of hgemm_wmma.cu at decode shapes (M = 16..128 rows
// against large N and K): its own translation unit, so that it gets its own
// tuned tiles and split-K depth (see its unit in nvcc-evo.acf).
#include "hgemm_wmma.cu"
