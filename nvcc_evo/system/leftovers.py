"""What an interrupted nvcc-evo could leave behind, and how nothing stays.

A run's private folders (`nvcc-evo-cand-PID-XXXX`, `nvcc-evo-steps-PID-XXXX`
in the temporary folder) hold a lock file that the run's process holds
(flock) for as long as the folder lives, and the files written beside an
ACF (`.NAME.PID.XXXX.tmp` of the ACF writer, `.nvcc-evo-candidate-PID-XXXX.acf`
of the command backend) are locked themselves. A later run removes only what
belongs to its own uid and whose lock it can take: a pid says nothing on a
shared /tmp (another pid namespace, a container, another machine), a lock
does, and the kernel releases it when its holder dies (`kill -9`, a lost
machine). A folder with no lock file (an older nvcc-evo's) goes once it is
an hour old.

Child processes run in a process group of their own, under a small shell
that kills the whole group when nvcc-evo dies (it sees the end of a pipe
only nvcc-evo holds open), so that no nvcc, cicc or ptxas outlives a killed
retune; a timeout or an interrupt kills the group too. Their output is
captured (run_in_group), or shown as it comes, the tail of their stderr kept
(run_in_group_shown: a user's program that runs long; the guard's own words
where it cannot start the command are held back for the caller to say).

Only os-level modules here: the split build path uses the folders and the sweep.
"""
from __future__ import annotations

import contextlib
import contextvars
import fcntl
import os
import re
import select
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from typing import Iterator, Mapping, NamedTuple

PRIVATE_FOLDER = re.compile(r"nvcc-evo-(?:cand|steps)-([0-9]+)-.+")
CANDIDATE_ACF = re.compile(r"\.nvcc-evo-candidate-([0-9]+)(?:-[A-Za-z0-9_]+)?\.acf")
LOCK_NAME = ".nvcc-evo.lock"
UNLOCKED_AGE = 3600          # seconds: a private folder with no lock file (an older nvcc-evo's) is
                             # left this long
SHELL = "/bin/sh"
# The group's guard. Its stdin is the read end of a pipe whose write end only this process holds
# (_death_pipe): a reader beside the command sees the end of that pipe when nvcc-evo dies, however
# it dies, and kills the whole group (itself, the command, everything the command started); a
# SIGTERM does the same. The command itself gets an empty stdin. No code of ours runs in the forked
# child before the exec (no preexec_fn): in a threaded process that is unsafe, and children that
# never reached their exec once hung several searches at once on a GPU machine for good.
GUARD = ('exec 3<&0 </dev/null; trap "kill -KILL 0" TERM; '
         '{ read _ <&3; kill -KILL 0; } >/dev/null 2>&1 & watch=$!; '
         '"$@" 3<&- & wait $!; status=$?; kill -KILL $watch 2>/dev/null; exit $status')
GROUP = "nvcc-evo-group"            # the guard's name ($0): the first word of what it says itself
NOT_STARTED = (126, 127)            # a shell's status for a command it could not start
_held: dict[str, int] = {}          # a private folder of this process -> the fd holding its lock
_held_lock = threading.Lock()


def _take(fd: int) -> bool:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return False
    return True


def private_folder(kind: str, parent: str | None = None, across_exec: bool = False) -> str:
    """A new private folder `nvcc-evo-KIND-PID-XXXX` in `parent` (default:
    the temporary folder), its lock held until `remove_private` (or the
    process's end; `across_exec`: the program this process execs, and its
    children, hold it on)."""
    path = tempfile.mkdtemp(prefix=f"nvcc-evo-{kind}-{os.getpid()}-", dir=parent)
    fresh = os.path.join(path, LOCK_NAME + ".new")
    fd = os.open(fresh, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)
    os.rename(fresh, os.path.join(path, LOCK_NAME))      # (seen by a sweep only once locked)
    if across_exec:
        os.set_inheritable(fd, True)      # subprocess still closes it in the children it starts
    with _held_lock:
        _held[path] = fd
    return path


def remove_private(path: str) -> None:
    """Remove a private folder of this process, then let its lock go."""
    shutil.rmtree(path, ignore_errors=True)
    with _held_lock:
        fd = _held.pop(path, None)
    if fd is not None:
        os.close(fd)


def held_file(folder: str, prefix: str, suffix: str) -> tuple[str, int]:
    """A new file `PREFIX PID-XXXX SUFFIX` in `folder` (no link followed),
    open for writing and locked for as long as the fd is open: (path, fd)."""
    path = os.path.join(folder, f"{prefix}{os.getpid()}-{os.urandom(4).hex()}{suffix}")
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    fcntl.flock(fd, fcntl.LOCK_EX)
    return path, fd


def _free_folder(entry: os.DirEntry) -> int | None:
    """The fd of the folder's lock, taken here, when no process holds it;
    -1 for an old folder with no lock file; None when it is in use."""
    try:
        fd = os.open(os.path.join(entry.path, LOCK_NAME),
                     os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        try:
            age = time.time() - entry.stat(follow_symlinks=False).st_mtime
            return -1 if age > UNLOCKED_AGE else None
        except OSError:
            return None
    except OSError:
        return None
    if _take(fd):
        return fd
    os.close(fd)
    return None


def _mine(entry: os.DirEntry, pattern: re.Pattern) -> bool:
    if pattern.fullmatch(entry.name) is None:
        return False
    try:
        return entry.stat(follow_symlinks=False).st_uid == os.getuid()
    except OSError:
        return False


def sweep_temporary(folder: str | None = None) -> list[str]:
    """Remove from `folder` (default: the temporary folder) the private
    folders of this uid that no process holds; the paths removed."""
    removed: list[str] = []
    try:
        entries = list(os.scandir(folder or tempfile.gettempdir()))
    except OSError:
        return removed
    for entry in entries:
        if not (entry.is_dir(follow_symlinks=False) and _mine(entry, PRIVATE_FOLDER)):
            continue
        with _held_lock:
            if entry.path in _held:
                continue
        fd = _free_folder(entry)
        if fd is not None:
            shutil.rmtree(entry.path, ignore_errors=True)     # (its lock still held here)
            removed.append(entry.path)
            if fd >= 0:
                os.close(fd)
    return removed


def _temporary_file(acf_name: str) -> re.Pattern:
    return re.compile(rf"\.{re.escape(acf_name)}\.([0-9]+)\.[A-Za-z0-9_-]+\.tmp")


def _remove_if_free(path: str) -> bool:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError:
        return False
    try:
        if not _take(fd):
            return False
        os.unlink(path)
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


def sweep_acf_folder(acf_path: str | os.PathLike[str]) -> list[str]:
    """Remove, beside the ACF, the temporary files of this uid that no writer
    holds (`.NAME.PID.XXXX.tmp`, `.nvcc-evo-candidate-PID-XXXX.acf`); the paths removed."""
    folder, name = os.path.split(os.path.realpath(acf_path))      # (a linked ACF is written at its
                                                                  # target)
    patterns = (_temporary_file(name), CANDIDATE_ACF)
    removed: list[str] = []
    try:
        entries = list(os.scandir(folder or "."))
    except OSError:
        return removed
    for entry in entries:
        if entry.is_file(follow_symlinks=False) and any(_mine(entry, p) for p in patterns) \
                and _remove_if_free(entry.path):
            removed.append(entry.path)
    return removed


def sweep_for(acf_path: str | os.PathLike[str]) -> list[str]:
    """Everything of processes that are gone: private folders in the
    temporary folder, temporary files beside the ACF (at a retune's start)."""
    return sweep_temporary() + sweep_acf_folder(acf_path)


# ---------------------------------------------------------------- child process groups
class Finished(NamedTuple):
    returncode: int | None        # None: killed at the timeout
    stdout: str
    stderr: str


_running: dict = {}               # the groups now running -> their owner, for kill_running
_running_lock = threading.Lock()
# Who starts the groups of this thread's work (a compile pool, say): `kill_running(owner)` kills
# only those, so that one search cancelling its compiles leaves another's running (several tasks at
# once).
OWNER: contextvars.ContextVar = contextvars.ContextVar("nvcc_evo_group_owner", default=None)


_pipe: tuple[int, int] | None = None      # (this process's id, the read end of its death pipe)
_pipe_lock = threading.Lock()


def _death_pipe() -> int:
    """The read end of this process's death pipe (made once per process; its
    write end, closed on exec, stays open until the process ends)."""
    global _pipe
    with _pipe_lock:
        if _pipe is None or _pipe[0] != os.getpid():      # (a forked child makes its own)
            read, _write = os.pipe()                       # both close on exec; the write end is
                                                           # never closed
            _pipe = (os.getpid(), read)
        return _pipe[1]


def kill_group(process: subprocess.Popen) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except OSError:
        pass


def kill_running(owner: object = None) -> None:
    """Kill every group started here that is still running (on an
    interrupt), or only those `owner` started (see OWNER)."""
    with _running_lock:
        running = [process
                   for process, whose in _running.items() if owner is None or whose is owner]
    for process in running:
        kill_group(process)


def _start(argv: list[str], cwd: str | os.PathLike[str] | None, env: Mapping[str, str] | None,
           stdout: int | None, text: bool) -> subprocess.Popen:
    """`argv` started under the guard, in a process group (and session) of its own, its stdin the
    pipe whose end tells the guard this process died, its stderr a pipe."""
    return subprocess.Popen([SHELL, "-c", GUARD, GROUP, *argv], cwd=cwd, env=env,
                            stdin=_death_pipe(), stdout=stdout, stderr=subprocess.PIPE,
                            text=text, start_new_session=True)


@contextlib.contextmanager
def _listed(process: subprocess.Popen) -> Iterator[None]:
    """`process` listed for kill_running while the block runs; an exception out of the block (an
    interrupt) kills its whole group and waits for it."""
    with _running_lock:
        _running[process] = OWNER.get()
    try:
        yield
    except BaseException:
        kill_group(process)
        process.wait()
        raise
    finally:
        with _running_lock:
            _running.pop(process, None)


def run_in_group(argv: list[str], cwd: str | os.PathLike[str] | None = None,
                 env: Mapping[str, str] | None = None, timeout: float | None = None) -> Finished:
    """Run `argv` in a process group (and session) of its own, output
    captured, stdin empty; its whole group is killed at the timeout, on an
    exception here (an interrupt), and when this process dies."""
    process = _start(argv, cwd, env, stdout=subprocess.PIPE, text=True)
    with _listed(process):
        try:
            stdout, stderr = process.communicate(timeout=timeout)
            return Finished(process.returncode, stdout, stderr)
        except subprocess.TimeoutExpired:
            kill_group(process)
            try:
                stdout, stderr = process.communicate(timeout=10)
            except subprocess.TimeoutExpired:      # something left the group and holds the pipes
                process.wait()
                stdout, stderr = "", ""
            return Finished(None, stdout or "", stderr or "")


SHOWN_TAIL = 64 * 1024      # bytes of a shown command's stderr kept for the message that quotes it
HELD = 4096                 # bytes of the guard's own words held back at most
LINGER = 2.0                # seconds a shown command's stderr is read on once the command has ended


def run_in_group_shown(argv: list[str], cwd: str | os.PathLike[str] | None = None,
                       env: Mapping[str, str] | None = None) -> Finished:
    """Run `argv` as run_in_group does, its output shown as it comes: its stdout is this process's
    (inherited: a terminal stays one), its stderr passed on to this process's stderr as it is
    written and its last SHOWN_TAIL bytes kept (Finished.stderr; Finished.stdout is ""). A process
    it left running that holds its stderr open is read LINGER seconds more, then no longer."""
    process = _start(argv, cwd, env, stdout=None, text=False)
    with _listed(process):
        assert process.stderr is not None
        tail, held = _pass_on(process, process.stderr.fileno())
        process.stderr.close()
        done = Finished(process.wait(), "", tail.decode(errors="replace"))
        if held and not not_started(done):
            _write_all(2, held)         # (the command's own words after all: shown, late)
        return done


def not_started(done: Finished) -> bool:
    """Whether the guard could not start the command (its status says so, and its stderr is the
    guard's own words: run_in_group_shown did not show them)."""
    return done.returncode in NOT_STARTED and done.stderr.startswith(f"{GROUP}: ")


def _pass_on(process: subprocess.Popen, fd: int) -> tuple[bytes, bytes]:
    """What `fd` (the command's stderr) gives, written to this stderr as it comes, until its end or
    LINGER seconds after the command's: its last SHOWN_TAIL bytes, and what was held back, not
    shown: the guard's own words, first of all (the command never started, its caller says why)."""
    tail, held = bytearray(), bytearray()
    ended: float | None = None
    while True:
        if ended is None and process.poll() is not None:
            ended = time.monotonic()
        if ended is not None and time.monotonic() - ended > LINGER:
            break
        ready, _, _ = select.select([fd], [], [], 0.1)
        if not ready:
            continue
        chunk = os.read(fd, 65536)
        if not chunk:
            break
        guards = bool(held) or (not tail and chunk.startswith(f"{GROUP}: ".encode()))
        if guards and len(held) + len(chunk) <= HELD:
            held += chunk
        else:
            _write_all(2, bytes(held) + chunk)      # (more than the guard says: the command's)
            held.clear()
        tail += chunk
        del tail[:-SHOWN_TAIL]
    return bytes(tail), bytes(held)


def _write_all(fd: int, data: bytes) -> None:
    """`data` to `fd`, whole; nothing where the fd is closed (the command's output is lost, not its
    run)."""
    view = memoryview(data)
    while view:
        try:
            view = view[os.write(fd, view):]
        except OSError:
            return
