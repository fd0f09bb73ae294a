"""What every part needs from the operating system, and nothing of nvcc-evo's
own: files (the one writer of nvcc-evo's own files: no link followed,
temporaries renamed into place), jsonlines (the
locked, repaired, synced appender of the JSON-lines stores), trust (whose ACF or settings file may
be used), locks (lock files only the guarded file's writers can open; a wait
that names the holder), leftovers (private folders held by a lock their run
keeps; child process groups that die with it), programs (the programs a verb
runs, said), clock (a search's `Deadline`, its one clock) and say (a line on
stderr).

Imports: the standard library only.
"""
