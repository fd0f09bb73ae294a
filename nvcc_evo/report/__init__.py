"""What a retune found, shown after it: `--report` and `--sass`.

page (`--report`: one HTML page per ACF), sections (what it shows, read
from the ACF and its results stores: a section per unit, target, device
and backend), markup (its one way to HTML: every value from a file escaped
unless built as Markup), plots (matplotlib figures for it, the `report` extra) and compare
(`--sass`: each unit's baseline against its ACF entry, kernel by kernel, in
the terminal).

Imports: nvcc_evo.retune, nvcc_evo.kerneldiff, nvcc_evo.execute, nvcc_evo.engine,
nvcc_evo.measure, nvcc_evo.driver, nvcc_evo.acf, nvcc_evo.errors and
nvcc_evo.system; only the cli imports it.
"""
