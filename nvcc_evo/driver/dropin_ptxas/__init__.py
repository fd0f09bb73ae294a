"""`nvcc-evo-ptxas` and `nvcc-evo-ptxas-blackwell`, the drop-in ptxas for
programs that run ptxas themselves (Triton, whose sm_100 and later code its
ptxas-blackwell compiles).

shim (its first code: os, sys and nvcc_evo.driver.common only; which
program a call stands in for; execs the real one at once when nothing can
apply), untouched (no kernel unit of the
cached index names the PTX: the real ptxas at once, with os, re, json and
zlib only), decide (a PTX's `.entry` names
against the ACF's kernel units, the options added for `--gpu-name`, the
`--version` answer), explain (`nvcc-evo-ptxas --explain`) and afresh (the
environment of a run whose Triton kernels must compile anew through the
stand-ins: a kernel unit's candidate run).

Imports: nvcc_evo.driver (common, match, settings, toolkit, compiledb,
build), nvcc_evo.acf, nvcc_evo.errors and nvcc_evo.system. This package's
own import must stay lean (no statement here): the shim runs on every
ptxas call.
"""
