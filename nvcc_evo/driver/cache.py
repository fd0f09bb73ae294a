"""The cache folder kept bounded (os and time only: a build may call it).

`~/.cache/nvcc-evo` (or `$XDG_CACHE_HOME/nvcc-evo`) holds small files that
are cheap to make again: ACF indexes (one per ACF text: every retune's write
makes a new one), toolkit and ptxas probes, the GPU check's cubins. Nothing
removed it: 1209 index files on one machine. `prune` keeps the newest files
of each kind up to its count and removes what no run has rewritten in
MAX_AGE_DAYS, and a writer's temporary left by a killed process. It runs
where nvcc-evo makes something new anyway: at the start of `--retune`, and
when a build writes a new ACF index (it has just parsed the ACF: a folder
listing is nothing beside that), never on a build that hits the cache.
"""
from __future__ import annotations

import os
import time

# The most files of each kind (the name's part before the first '-') kept, newest first.
KEEP = {"acf": 256, "toolkit": 16, "check": 64}
KEEP_OTHER = 512               # option and ptxas probes, controls checks, kinds to come
MAX_AGE_DAYS = 90
TEMPORARY_AGE = 3600           # seconds: a `NAME.PID.tmp` this old was left by a killed writer


def prune(folder: str | os.PathLike[str], now: float | None = None) -> list[str]:
    """Remove what the bounds above leave out of `folder` (never a folder
    or a link's target: only its own plain files); the names removed."""
    now = time.time() if now is None else now
    try:
        entries = [e for e in os.scandir(folder) if e.is_file(follow_symlinks=False)]
    except OSError:
        return []
    kinds: dict[str, list] = {}
    doomed = []
    for entry in entries:
        age = now - entry.stat(follow_symlinks=False).st_mtime
        if entry.name.endswith(".tmp"):
            if age > TEMPORARY_AGE:
                doomed.append(entry)
        elif age > MAX_AGE_DAYS * 86400:
            doomed.append(entry)
        else:
            kinds.setdefault(entry.name.partition("-")[0], []).append(entry)
    for kind, files in kinds.items():
        files.sort(key=lambda e: e.stat(follow_symlinks=False).st_mtime, reverse=True)
        doomed += files[KEEP.get(kind, KEEP_OTHER):]
    removed = []
    for entry in doomed:
        try:
            os.unlink(entry.path)
            removed.append(entry.name)
        except OSError:
            pass                 # another process removed or replaced it meanwhile
    return removed
