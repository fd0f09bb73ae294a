// The flash-attention forward of flash_attention.cu at head dimension 64: its
// own translation unit, so that it gets its own tuned tiles.
#define HEAD_DIM 64
#include "flash_attention.cu"
