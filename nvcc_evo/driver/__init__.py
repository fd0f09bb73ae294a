"""The drop-in nvcc: what runs when a build calls `nvcc-evo` as its compiler.

shim (the first code of every compile; execs the real nvcc at once when no
ACF can apply), common (what the shim and the rest share, only os and sys),
wrapper (decides the added flags and how to run nvcc), nvcc_options (nvcc's
command line), plan (which ACF entry applies), flags (knob settings to
flags), toolkit (probes of the real nvcc and ptxas), compiledb (each unit's
build command, recorded for retunes), split (nvcc's steps run one by one
for per-target ptxas flags), explain (`--explain`), settings (the project
settings beside the ACF, with their precedence), candidate (one
candidate compiled as the build compiles it, for the search); ptxas_shim,
kernels and kernels_explain (`nvcc-evo-ptxas`, the drop-in ptxas for
programs that run ptxas themselves, Triton's kernels).

Imports: nvcc_evo.acf, nvcc_evo.errors and nvcc_evo.system; never
nvcc_evo.measure or nvcc_evo.search.
"""
