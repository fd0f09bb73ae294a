"""A candidate's build and what its machine code holds.

- compile: one candidate compiled exactly as the build compiles it (the
  build's own command line with the candidate's flags, run in a private
  folder), the compile pool's unit of work, and the SASS hash that tells
  two builds' machine code apart; SearchTask, what the layers below the
  retune (execute, kerneldiff) read of a search's task
- sass: per kernel, what ptxas's resource report and the cubin say
  (registers, spills, stack, shared memory, barriers, instruction counts)
- occupancy: how many blocks and warps of a kernel one SM holds, and why a
  launch is refused

Imports: nvcc_evo.driver (the build's flags and steps), nvcc_evo.acf (the
unit a search's task names), nvcc_evo.status, nvcc_evo.errors and
nvcc_evo.system; never nvcc_evo.measure or the layers above it
(tests/test_architecture.py).
"""
