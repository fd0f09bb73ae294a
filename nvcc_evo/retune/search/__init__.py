"""One search of a retune: prepare (the search made ready) and tune
(search -> decide), each stage returning a typed value; progress (a live
bar or lines on stderr) and speedsafe (no slower kernels without a GPU).

Imports: what nvcc_evo.retune may import, its scope and its outcome.
"""
