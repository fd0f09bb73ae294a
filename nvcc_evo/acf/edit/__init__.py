"""Writing an ACF: the canonical text and the rewrites that keep every other byte.

format (the canonical formatter, comments kept), spelling (one value,
expression or statement as the formatter spells it), retarget (one target block
rewritten in place) and write (the one writer of an ACF's bytes: locked
read-modify-write, atomic replace, mode, owner, line endings kept).

Imports: nvcc_evo.acf's model, expressions, parse and text, nvcc_evo.errors and
nvcc_evo.system.locks.
"""
