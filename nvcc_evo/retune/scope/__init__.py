"""What a retune covers and can reach: tasks (the units and targets it
covers, which are stale, how each is built), staleness (why an entry is
stale), options (what one retune does, each setting decided once), reach
(only knob values that reach the user's binary are searched), caps (register
caps the device link or a kernel would not survive) and ship (the ship check
before a write).

Imports: what nvcc_evo.retune may import, and the retune's outcome
(choice's `Outcome` for types; writeback's `settings_of`, the entry the
ship check compiles). Every function is annotated (mypy's
disallow_untyped_defs): a task is a `Task`, a plan a `FlagPlan`.
"""
