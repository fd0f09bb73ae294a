"""The search: `nvcc-evo --retune`, from stale ACF entries to written choices.

selection (which units and targets are stale, and how each is built),
space (search spaces, genomes and their operators), evolve (the
multi-objective engine), evaluate (a generation compiled and measured,
against the goal), measurers (which backend answers), store (the results
store), options (what one retune does, its settings decided once),
retune (the whole run, resume, exit status), choice (the selection rule,
the backend's confirmation and drift), writeback (the choice written into the ACF), report (the summary),
progress (a live bar or lines on stderr), plots (matplotlib figures) and
findings (`--report`: the HTML page of an ACF's results).

Imports: nvcc_evo.acf, nvcc_evo.driver, nvcc_evo.measure, nvcc_evo.errors
and nvcc_evo.system; only the cli imports it.
"""
