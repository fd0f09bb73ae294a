"""`nvcc-evo --retune`: from stale ACF entries to choices written back.

tasks (which units and targets a retune covers, which are stale and why,
how each is built), options (what one retune does, each setting decided
once), reach (only knob values that reach the user's binary are searched;
the ship check before a write), speedsafe (no slower kernels without a
GPU), run (the whole retune: one search per stale unit and target, the
write, exit status), tune (one search as prepare -> search -> decide, each
stage returning a typed value), choice (the selection rule, the backend's
confirmation and drift, the `Outcome` of one search), writeback (the choice into the ACF), kernels and kernelview (why
a choice is faster, kernel by kernel), summary (the end-of-retune table)
and progress (a live bar or lines on stderr).

Imports: nvcc_evo.execute, nvcc_evo.engine, nvcc_evo.measure,
nvcc_evo.driver, nvcc_evo.acf, nvcc_evo.backends, nvcc_evo.errors and
nvcc_evo.system; only
nvcc_evo.report and the cli import it.
"""
