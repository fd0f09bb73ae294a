"""Running candidates: a generation's genomes compiled, measured and stored.

evaluate (the Evaluator: genomes -> compile -> dedupe by SASS -> measure ->
store -> Evaluation; racing's incumbent, the stop event, the deadline),
measured (what a search has measured, the record the Evaluator writes and
the learners, the choice and the summary read; the tally), goal (what a
search minimises and what must hold), measurers (which backend answers for a
retune's candidates: a factory per row of the table of backends,
nvcc_evo.backends), devices (where they are measured: the backend `auto`
picks, the GPUs, their lanes calibrated), lanes (several measuring lanes,
one per GPU or Ray worker), cluster (the Ray backend), together (several
searches at once, sharing compile slots and GPUs), store (the append-only
results store), warm (warm starts: the unit's other contexts and similar
units, the engine's `Known`) and learned (what refused launches and compiles
and wrong outputs teach the engine's `avoid`).

Imports: nvcc_evo.engine, nvcc_evo.measure, nvcc_evo.driver, nvcc_evo.acf,
nvcc_evo.backends, nvcc_evo.errors and nvcc_evo.system; never nvcc_evo.retune or
report.
"""
