"""Advisory locks (fcntl.flock) for the files nvcc-evo writes: one writer at a time.

Editors take no locks, so a lock only orders nvcc-evo's own writers (retunes,
`--acf-fmt`, results-store appends); acf.edit.write.rewrite checks for an editor's
save separately. A lock goes with its process: kill -9 releases it.
"""
from __future__ import annotations

import fcntl
import os
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

from nvcc_evo.system.files import folders, open_regular


def _try_lock(fd: int) -> bool:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def hold(fd: int) -> int:
    """A second fd on `fd`'s open file, holding its lock until it is closed
    (the first may be closed meanwhile)."""
    held = os.dup(fd)
    fcntl.flock(held, fcntl.LOCK_EX)
    return held


@contextmanager
def file_lock(path: Path) -> Iterator[int]:
    """Hold the lock of the file now at `path` (it must exist). A writer
    replaces the file by a rename, so the lock is taken on the file itself
    and retaken when, while waiting, a rename put another file there."""
    while True:
        fd = os.open(path, os.O_RDONLY)
        fcntl.flock(fd, fcntl.LOCK_EX)
        now, held = os.stat(path), os.fstat(fd)
        if (now.st_dev, now.st_ino) == (held.st_dev, held.st_ino):
            break
        os.close(fd)
    try:
        yield fd
    finally:
        os.close(fd)


@contextmanager
def run_lock(path: Path, on_wait: Callable[[str], None]) -> Iterator[None]:
    """Hold the lock file at `path` (created; never removed: removing a lock
    file races with its next taker) for a whole run. A second run says who
    holds it (`on_wait`) and waits."""
    folders(path.parent.parent, path.parent.name)
    fd = open_regular(path, os.O_RDWR | os.O_CREAT)          # a link there is refused, its target untouched
    try:
        if not _try_lock(fd):
            holder = os.pread(fd, 64, 0).decode(errors="replace").strip() or "?"
            on_wait(holder)
            fcntl.flock(fd, fcntl.LOCK_EX)
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        yield
    finally:
        os.close(fd)
