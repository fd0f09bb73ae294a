"""What one search of a retune ends with: choice (the selection rule, the
backend's confirmation and drift, the `Outcome`), writeback (the choice
into the ACF) and summary (the end-of-retune table).

Imports: what nvcc_evo.retune may import and its scope (a task, the
options).
"""
