__device__ float scale_by(float x) { return 2.0f * x; }
