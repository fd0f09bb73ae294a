"""What every part needs from the operating system, and nothing of nvcc-evo:
locks (file locks for the ACF and the retune), leftovers (private folders
named for their process, swept when it is gone; child process groups that
die with it).

Imports: the standard library only.
"""
