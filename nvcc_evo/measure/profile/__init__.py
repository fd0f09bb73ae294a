"""Kernel times while a program runs, with no harness: CUPTI's activity
records of every kernel a process (and its children) launches.

inject.c (package data) is the injection library the CUDA driver loads
into a process named by CUDA_INJECTION64_PATH: it keeps a table per kernel
name and launch shape and writes it at exit. library builds it with the
system's C compiler against the CUPTI it finds (the nvidia-cuda-cupti wheel
of the `profile` extra, or the toolkit's), once per release, into the
user's cache; records reads what the processes of one run wrote, and says
how much GPU time a set of kernels took. `nvcc-evo --hot` and the command
backend's `metric NAME kernels` both use it.

Imports: nvcc_evo.driver (the real nvcc, the CUDA driver), nvcc_evo.cubin
(the kernels a cubin defines), nvcc_evo.errors and nvcc_evo.system; never
the layers above it.
"""
