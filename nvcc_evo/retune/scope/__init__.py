"""What a retune covers and can reach: tasks (the units and targets it
covers, which are stale and why, how each is built), options (what one
retune does, each setting decided once) and reach (only knob values that
reach the user's binary are searched; the ship check before a write).

Imports: what nvcc_evo.retune may import, and the retune's outcome
(choice's `Outcome` for types, writeback's settings lazily).
"""
