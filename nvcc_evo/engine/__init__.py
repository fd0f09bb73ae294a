"""The search engine: points of a search space and how the next ones are chosen.

space (search spaces, genomes, the search block's requires and the seeded
operators), evolve (the NSGA-II engine: ask/tell, restarts when it
stagnates, hypervolume; the search loop), boosters (curated starting points
per kernel family, boosters.toml) and budget (a search's budget in time or
evaluations, in numbers). It knows nothing of compilers or GPUs: a genome
in, scores out. What it needs of the layers above is a Protocol it owns
(evolve.Avoid: what is known to fail; evolve.Known: evaluations made before
the search, a warm start; evolve.Overlapping: an evaluate that compiles
ahead; evolve.TimeLeft: the search's time, a system.clock.Deadline;
budget.Asked: the budget decided), and every parameter is typed (mypy's
disallow_untyped_defs).

Imports: nvcc_evo.acf (the model, knobs and source parameters a space is
built from), nvcc_evo.errors and nvcc_evo.system; never nvcc_evo.driver,
measure, execute, retune or report (tests/test_architecture.py).
"""
