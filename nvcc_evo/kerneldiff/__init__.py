"""Why one build is faster than another, kernel by kernel: the machine code
of two builds of a unit side by side, the retune's and the report's.

compare (the baseline and the chosen build compiled again and their
kernels compared: registers, spills, shared memory, instructions, the
instruction mix, occupancy at the bench's block size; `KernelStore`, the
comparisons kept in `.nvcc-evo/kernels.jsonl`) and view (a comparison as
words: a table per kernel, its change cells, names demangled).

Imports: nvcc_evo.cubin, nvcc_evo.acf, nvcc_evo.errors and
nvcc_evo.system; nvcc_evo.retune and nvcc_evo.report import it.
"""
