"""`nvcc-evo --retune`: from stale ACF entries to choices written back.

run (the whole retune: one search per stale unit and target, the write,
exit status) over three parts, in the order a retune goes through them:

- scope: what a retune covers and can reach (tasks: which units and
  targets, which are stale, how each is built; staleness: why; options:
  what one retune does, each setting decided once; reach: only knob values
  that reach the user's binary are searched; caps: register caps the link
  or a kernel would not survive; ship: the ship check before a write)
- search: one search (prepare, then tune: search -> decide, each stage
  returning a typed value; progress: a live bar or lines on stderr;
  speedsafe: no slower kernels without a GPU)
- outcome: what a search ends with (choice: the selection rule, the
  backend's confirmation and drift, the `Outcome`; writeback: the choice
  into the ACF; summary: the end-of-retune table)

Why a choice is faster, kernel by kernel, is nvcc_evo.kerneldiff's, which
the report reads too.

Imports: nvcc_evo.execute, nvcc_evo.engine, nvcc_evo.kerneldiff,
nvcc_evo.measure, nvcc_evo.cubin, nvcc_evo.driver, nvcc_evo.acf,
nvcc_evo.backends, nvcc_evo.errors and nvcc_evo.system; only
nvcc_evo.report, nvcc_evo.hot and the cli import it.
"""
