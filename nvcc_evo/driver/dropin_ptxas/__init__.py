"""`nvcc-evo-ptxas`, the drop-in ptxas for programs that run ptxas themselves (Triton).

shim (its first code: os, sys and nvcc_evo.driver.common only; execs the
real ptxas at once when nothing can apply), untouched (no kernel unit of the
cached index names the PTX: the real ptxas at once, with os, re, json and
zlib only), decide (a PTX's `.entry` names
against the ACF's kernel units, the options added for `--gpu-name`, the
`--version` answer) and explain (`nvcc-evo-ptxas --explain`).

Imports: nvcc_evo.driver (common, match, settings, toolkit, compiledb,
build), nvcc_evo.acf, nvcc_evo.errors and nvcc_evo.system. This package's
own import must stay lean (no statement here): the shim runs on every
ptxas call.
"""
