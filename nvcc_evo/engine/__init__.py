"""The search engine: points of a search space and how the next ones are chosen.

space (search spaces, genomes, the search block's requires and the seeded
operators), evolve (the NSGA-II engine: ask/tell, restarts when it
stagnates, hypervolume; the search loop), boosters (curated starting points
per kernel family, boosters.toml), learned (constraints read from refused
launches, the engine's `avoid`) and budget (a search's budget in time or
evaluations, said up front). It knows nothing of compilers or GPUs: a
genome in, scores out.

Imports: nvcc_evo.acf (the model, knobs and source parameters a space is
built from), nvcc_evo.driver.settings (the budget's defaults), nvcc_evo.errors
and nvcc_evo.system; never nvcc_evo.measure, execute, retune or report.
"""
