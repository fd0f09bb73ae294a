"""The bench block: how a unit is measured.

spec (the kernel form's tables of dtypes, initialisers and functions, its
expressions, `plan_bench`), command (the command form's statements,
`read_metric`, `metric_step`) and check (resolve's checks of a bench block,
either form).

Imports: nvcc_evo.acf's model, expressions, sources and unitpath, nvcc_evo.errors.
"""
