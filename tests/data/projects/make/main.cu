#include <cstdio>
void launch_mix(const float* x, float* y, int n);
int main() { std::printf("built\n"); return 0; }
