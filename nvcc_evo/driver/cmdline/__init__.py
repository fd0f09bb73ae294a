"""How one nvcc call is compiled with an entry's knobs.

compileplan (the one compile plan of builds and retunes: common flags, the
ptxas knobs of each (input, arch) step, every knob left out with why),
nvcc_table (nvcc's options as a table), nvcc_options (a call read with it,
without changing it),
flags (knob values as nvcc arguments; the user's own flags win), split
(nvcc's steps run one by one where steps need different ptxas options),
ptxas (a ptxas other than nvcc's chosen and invoked; controls files
probed) and cuda_driver (does the driver load a cubin, through ctypes).

Imports: nvcc_evo.acf, nvcc_evo.driver's plan, toolkit and common,
nvcc_evo.errors and nvcc_evo.system.
"""
