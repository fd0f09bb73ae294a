"""The ACF language: the plain-text file of tuned controls and its tools.

model (the typed values every stage passes on), knobs (the table of knobs
and the flags they stand for), objectives, grammar/acf.lark with parse, transform
(the tree into the model's values) and syntax (located errors), resolve and benchcheck
(the semantic check and loading), format (canonical text), retarget (one
target block rewritten, every other byte kept), text and write (reading and writing
the file safely), benchspec (the bench block's expressions), unitpath (unit
globs) and sources (the `-D` parameters a source gives itself).

Imports: nvcc_evo.errors and nvcc_evo.system only; every other part imports it.
"""
