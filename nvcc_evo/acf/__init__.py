"""The ACF language: the plain-text file of tuned controls and its tools.

model (the typed values every stage passes on), expressions (a value's
place in the text, `Span`, and the expressions benches and requires are
written in), knobs (the table of knobs
and the flags they stand for), objectives, grammar/acf.lark with parse,
transform (the tree into the model's values) and syntax (located errors),
resolve (the semantic check and loading), text (reading the file safely),
unitpath and kernelname (unit globs: paths, PTX entry names) and sources
(the `-D` parameters a source gives itself); bench/ (the bench block: its
expressions, the command form, its checks); edit/ (the canonical text, one
target block rewritten, the one writer of an ACF's bytes).

Imports: nvcc_evo.errors and nvcc_evo.system only; every other part imports it.
"""
