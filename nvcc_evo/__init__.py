"""nvcc-evo: tuned compiler controls for every CUDA translation unit."""

__version__ = "0.1.0"
