"""A stand-in for a user's Triton benchmark on a machine with no GPU: it
compiles the small matmul (as the first call of a real benchmark would) and
prints its "time", here the registers its cubin uses, so that a retune
through the command backend has a real, deterministic objective. An
argument names the compute capability (default 90; 100 is compiled by
Triton's ptxas-blackwell)."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from kernels import compile_kernel                                   # noqa: E402

from nvcc_evo.cubin.sass import cubin_registers                      # noqa: E402

capability = int(sys.argv[1]) if len(sys.argv) > 1 else 90
print(f"time {cubin_registers(compile_kernel('matmul_small', capability))} ms")
