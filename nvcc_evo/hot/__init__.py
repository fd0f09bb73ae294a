"""`nvcc-evo --hot`: which kernels load the GPU, and which units build them.

run (the verb: the command run once with kernel recording, or a saved
profile read), profile (a profile's value and files: ours, and Nsight
Systems' kernel summary CSV), names (mangled and demangled spellings made
comparable), origin (the recorded builds that define each kernel, the ACF
unit covering each), table (the ranking and its text), write (`--write`:
unit blocks for the hot units, with a bench of their kernels' GPU time).

Imports: nvcc_evo.retune (what reaches a build), nvcc_evo.measure (kernel
times, a record's compile), nvcc_evo.driver (the compile database),
nvcc_evo.acf (the ACF, its writer), nvcc_evo.errors and nvcc_evo.system;
never report or the CLI.
"""
