"""The drop-in nvcc: what runs when a build calls `nvcc-evo` as its compiler.

shim (the first code of every compile; execs the real nvcc at once when no
ACF can apply), common (what the shim and the rest share, only os and sys),
wrapper (decides the added flags and how to run nvcc), toolkit (probes of
the real nvcc and ptxas), compiledb (each unit's build command, recorded for
retunes), cache (the cache folder kept bounded), explain (`--explain`),
settings (the project settings beside the ACF, with their precedence;
tomlplaces: where each key stands in the file's text), project (how every verb
opens the project: the ACF found, trusted, readable; its settings);
match/ (which ACF, unit and target apply to a call: finding the ACF, its
index, sorting calls, SASS architectures, staleness); build/ (how one call
is compiled: the compile plan, nvcc's options, the flag mapping, split
steps, ptxas); dropin_ptxas/ (`nvcc-evo-ptxas`, the drop-in ptxas for
programs that run ptxas themselves, Triton's kernels).

Imports: nvcc_evo.acf, nvcc_evo.backends (the settings' backend names),
nvcc_evo.errors and nvcc_evo.system; never
nvcc_evo.measure or the layers above it.
"""
