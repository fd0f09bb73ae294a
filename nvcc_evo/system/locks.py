"""Advisory locks (fcntl.flock) for the files nvcc-evo writes: one writer at a time.

`flock` needs no more than a descriptor open for reading, so a lock taken on
a file others may read is one any local user can hold forever. So nvcc-evo
never locks the files it guards (the ACF, the results stores) nor any file
others may open: each guarded file has a lock file in the `locks` folder of
its project's `.nvcc-evo/` that only those who may write the guarded file can
open. Where only its owner may write it: a 0600 file in a 0700 folder. Where
its group may write it too (a team's shared checkout): a 0660 file of that
group in a 2770 folder of that group, so that the team's members take turns
and nobody else can open it. A lock file or folder that others may open is
made private where it is this user's, else refused (`Refused`, naming it).

A process never waits on itself: its threads take turns on a lock file
through a mutex of their own before any of them takes the flock, and a lock
is released (LOCK_UN) at the end of its `with`, not only by the close of its
descriptor, since a child another thread forks holds a copy of every
descriptor until its exec (the lock would outlive the `with` in it, and the
next taker would wait for that child, naming this process or nobody).

A wait says who holds the lock (/proc/locks names the holder's pid; its
command line where it may be read; a process that has exited is never
named) and gives up after `Wait.seconds` with `Busy` (a TimeoutError).
Editors take no locks: acf.edit.write.rewrite looks for an editor's save
separately. A lock goes with its process: kill -9 releases it. Lock files are
never removed (removing one races with its next taker).
"""
from __future__ import annotations

import errno
import fcntl
import os
import stat
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator, NamedTuple

from nvcc_evo.system.files import STATE, Refused, folder, folders, open_regular

LOCKS = "locks"
WAIT_SETTING = "lock.wait or NVCC_EVO_LOCK_WAIT"      # the setting that says how long a wait lasts
SHOWN_COMMAND = 120                                  # characters of a holder's command line said
_turns: dict[tuple[int, int], threading.Lock] = {}   # a lock file (device, inode) -> this process's
_turns_guard = threading.Lock()                      # threads' turn on it


def _say(message: str) -> None:
    sys.stderr.write(f"nvcc-evo: {message}\n")
    sys.stderr.flush()


# who holds a lock where /proc/locks names no live process: one of another machine or pid namespace,
# or none any more
UNSEEN = "a process nvcc-evo cannot see (another machine, or a pid namespace)"


class Wait(NamedTuple):
    """How long a wait for a lock lasts before it gives up, and where it is said."""

    seconds: float = 600.0
    say: Callable[[str], None] = _say


class Busy(TimeoutError):
    """A lock still held by another process when the wait ran out."""

    def __init__(self, message: str):
        super().__init__(errno.ETIMEDOUT, message)

    def __str__(self) -> str:
        return self.strerror or ""


def hold(fd: int) -> int:
    """A second fd on `fd`'s open file, holding its lock until it is closed
    (the first may be closed meanwhile)."""
    held = os.dup(fd)
    fcntl.flock(held, fcntl.LOCK_EX)
    return held


def _try_lock(fd: int) -> bool:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def lock_file(project: Path, name: str) -> Path:
    """Where the lock named `name` of a project (the folder holding `.nvcc-evo/`) lives."""
    return project / STATE / LOCKS / name


def lock_for(guarded: Path) -> Path:
    """The lock file of the file at `guarded`: an ACF's in `.nvcc-evo/` beside
    it, a file of `.nvcc-evo/` (a results store) in that one."""
    project = guarded.parent.parent if guarded.parent.name == STATE else guarded.parent
    return lock_file(project, f"{guarded.name}.lock")


def _shared_group(like: os.stat_result) -> int | None:
    """The group that may take the lock besides its owner: the guarded file's,
    where that group may write it; None where only its owner may."""
    return like.st_gid if like.st_mode & stat.S_IWGRP else None


def _private(fd: int, path: str, mode: int, group: int | None) -> None:
    """Make this user's open lock file or folder `mode` (of `group`), or
    refuse one that others may open and this user cannot change."""
    info = os.fstat(fd)
    if info.st_mode & 0o7777 == mode and (group is None or info.st_gid == group):
        return
    if info.st_uid == os.geteuid():
        if group is not None and info.st_gid != group:
            try:
                os.fchown(fd, -1, group)
            except PermissionError:  # not of that group: the lock stays this user's alone
                mode &= 0o7700
        os.fchmod(fd, mode)
    elif info.st_mode & 0o007:
        raise Refused(path, f"may be opened by every user (mode {info.st_mode & 0o7777:04o}, "
                            f"owner uid {info.st_uid}): anyone could hold its lock forever; "
                            "remove it")


def _open_lock(path: Path, like: os.stat_result) -> int:
    """The lock file at `path`, opened (made where missing, with its folders)
    so that only the guarded file's writers may open it."""
    group = _shared_group(like)
    state = folders(path.parent.parent.parent, path.parent.parent.name)
    locks = folder(os.path.join(state, path.parent.name), private=True)  # a link there is refused
    at = os.open(locks, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        _private(at, locks, 0o2770 if group is not None else 0o700, group)
    finally:
        os.close(at)
    fd = open_regular(path, os.O_RDONLY | os.O_CREAT, 0o600)              # a link there is refused
    try:
        _private(fd, str(path), 0o660 if group is not None else 0o600, group)
    except BaseException:
        os.close(fd)
        raise
    return fd


def holders(fd: int) -> str:
    """Who holds the lock of the open file, in words: each live holder's pid
    and command line, from /proc/locks."""
    info = os.fstat(fd)
    device = f"{os.major(info.st_dev):02x}:{os.minor(info.st_dev):02x}:{info.st_ino}"
    try:
        with open("/proc/locks") as table:
            lines = table.read().splitlines()
    except OSError:
        lines = []
    pids = {fields[4] for fields in (line.split() for line in lines)
            if len(fields) > 5 and fields[1] == "FLOCK" and fields[5] == device}
    live = [pid for pid in pids if pid != "0" and os.path.isdir(f"/proc/{pid}")]
    if pids and not live:               # the taker has exited; a child it started holds the lock on
        live = _openers((info.st_dev, info.st_ino))
    said = [_process(pid) for pid in sorted(live, key=int)]
    if not said:
        return UNSEEN
    return "; ".join(said)


def _openers(file: tuple[int, int]) -> list[str]:
    """The processes (of those this user may look into) with the file open, but this one."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        if int(pid) == os.getpid():
            continue
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                info = os.stat(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if (info.st_dev, info.st_ino) == file:
                found.append(pid)
                break
    return found


def _process(pid: str) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            words = handle.read().rstrip(b"\0").replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        words = ""
    words = words.translate({c: " " for c in range(32)})
    if len(words) > SHOWN_COMMAND:
        words = words[:SHOWN_COMMAND] + "..."
    return f"pid {pid}, {words}" if words else f"pid {pid}"


@contextmanager
def locked(guarded: Path, lock: Path, wait: Wait, waiting: str) -> Iterator[None]:
    """Hold the lock file `lock` of the file at `guarded` (or of its folder,
    for a file not there yet). When another process holds it: `waiting`
    (what that means) is said with who holds it, and the wait gives up
    after `wait.seconds` with Busy."""
    try:
        like = os.stat(guarded)
    except FileNotFoundError:
        like = os.stat(guarded.parent)
    fd = _open_lock(lock, like)
    try:
        with _turn(fd):
            if not _try_lock(fd):
                _wait_for(fd, lock, wait, waiting)
            try:
                yield
            finally:
                fcntl.flock(fd, fcntl.LOCK_UN)      # now, whoever else holds a copy of fd
    finally:
        os.close(fd)


def _turn(fd: int) -> threading.Lock:
    """This process's mutex for the lock file open at `fd`: its threads wait
    for each other there (their own work, said by nobody), never through the
    flock. Not re-entrant: a thread holding a lock file must not take it again."""
    info = os.fstat(fd)
    with _turns_guard:
        return _turns.setdefault((info.st_dev, info.st_ino), threading.Lock())


def _wait_for(fd: int, lock: Path, wait: Wait, waiting: str) -> None:
    who = holders(fd)
    if who == UNSEEN and _try_lock(fd):     # let go before /proc/locks was read: nothing to say
        return
    wait.say(f"{waiting} ({who}); waiting for it to finish (at most {wait.seconds:g} s: "
             f"{WAIT_SETTING})")
    deadline, pause = time.monotonic() + wait.seconds, 0.02
    while not _try_lock(fd):
        left = deadline - time.monotonic()
        if left <= 0:
            raise Busy(f"{waiting} ({holders(fd)}) still after {wait.seconds:g} s; gave up waiting "
                       f"(the lock {lock}; {WAIT_SETTING} waits longer)")
        time.sleep(min(pause, left))
        pause = min(pause * 2, 0.5)
