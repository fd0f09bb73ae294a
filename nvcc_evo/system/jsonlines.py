"""Append-only JSON-lines files: the results store (execute.store) and the
kernels' store (kerneldiff.compare) both write and read through `JsonLines`.

An append takes the file's lock (system.locks: one appender at a time, so
that the torn-line check and the write are one step), ends a last line cut
short by a crash (kill -9, a full disk) so that it never swallows the new
one, writes the whole line and syncs it to disk. A read returns what the
caller's decoder makes of each line and counts the lines it refuses (cut
short, garbage, another shape) in `skipped`.
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable, TypeVar

from nvcc_evo.system.files import append, folders
from nvcc_evo.system.locks import Wait, lock_for, locked

T = TypeVar("T")
# what a decoder may raise
NOT_A_LINE = (ValueError, LookupError, TypeError, AttributeError, RecursionError)


class JsonLines:
    def __init__(self, path: Path, wait: Wait = Wait()):
        self.path = path
        self.wait = wait        # how long an append waits for another's
        self.skipped = 0        # lines the last read refused

    def append(self, line: str) -> None:
        """One line (JSON text without its newline), locked, repaired before and synced; OSError
        (Refused for a link or a non-regular file, Busy after the wait) where it cannot be
        written."""
        folders(self.path.parent.parent, self.path.parent.name)
        with locked(self.path, lock_for(self.path), self.wait, "another nvcc-evo is appending to "
                                                               f"{self.path}"):
            append(self.path, line + "\n", whole_lines=True, sync=True)

    def read(self, decode: Callable[[str], T]) -> list[T]:
        """Each line `decode` accepts; a missing or unreadable file has none."""
        found: list[T] = []
        self.skipped = 0
        if not self.path.is_file():      # none yet; a FIFO would block, a device never end (append
                                         # says so)
            return found
        try:
            lines = self.path.read_text(errors="replace").splitlines()
        except OSError:
            return found
        for line in lines:
            try:
                found.append(decode(line))
            except NOT_A_LINE:
                self.skipped += bool(line.strip())
        return found
