"""What an interrupted nvcc-evo could leave behind, and how nothing stays.

Private folders carry the pid of the process that made them
(`nvcc-evo-cand-PID-XXXX`, `nvcc-evo-steps-PID-XXXX` in the temporary folder),
and so do the files written beside an ACF (`.NAME.PID.XXXX.tmp` of the ACF
writer, `.nvcc-evo-candidate-PID.acf` of the command backend): a later run
removes those whose process is gone (`kill -9`, a lost machine). A process
still alive, or of another user, keeps its own. (A pid reused since is
taken for alive: that leaves a folder, it never removes a live one.)

Child processes run in a process group of their own, under a small shell
that kills the whole group when nvcc-evo dies (Linux: the parent-death
signal), so that no nvcc, cicc or ptxas outlives a killed retune; a timeout
or an interrupt kills the group too.

Only os-level modules here: the split build path uses the folders and the sweep.
"""
from __future__ import annotations

import contextvars
import os
import re
import shutil
import signal
import subprocess
import tempfile
import threading
from typing import NamedTuple

PRIVATE_FOLDER = re.compile(r"nvcc-evo-(?:cand|steps)-([0-9]+)-.+")
CANDIDATE_ACF = re.compile(r"\.nvcc-evo-candidate-([0-9]+)\.acf")
SHELL = "/bin/sh"
# The group's guard: nvcc-evo's death sends it SIGTERM, and it kills its
# whole group (itself, the command, everything the command started).
GUARD = 'trap "kill -KILL 0" TERM; "$@" & wait $!'


def private_folder(kind: str, parent: str | None = None) -> str:
    """A new private folder `nvcc-evo-KIND-PID-XXXX` in `parent` (default: the temporary folder)."""
    return tempfile.mkdtemp(prefix=f"nvcc-evo-{kind}-{os.getpid()}-", dir=parent)


def is_gone(pid: int) -> bool:
    """True only when no process has this pid (not for one of another user)."""
    if pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except (OSError, OverflowError):   # PermissionError: alive, someone else's
        return False
    return False


def _temporary_file(acf_name: str) -> re.Pattern:
    return re.compile(rf"\.{re.escape(acf_name)}\.([0-9]+)\.[A-Za-z0-9_-]+\.tmp")


def _ours_and_gone(entry: os.DirEntry, pattern: re.Pattern) -> bool:
    match = pattern.fullmatch(entry.name)
    if match is None:
        return False
    try:
        owner = entry.stat(follow_symlinks=False).st_uid
    except OSError:
        return False
    return owner == os.getuid() and is_gone(int(match.group(1)))


def sweep_temporary(folder: str | None = None) -> list[str]:
    """Remove the private folders of processes that are gone from `folder`
    (default: the temporary folder); the paths removed."""
    removed = []
    try:
        entries = list(os.scandir(folder or tempfile.gettempdir()))
    except OSError:
        return removed
    for entry in entries:
        if entry.is_dir(follow_symlinks=False) and _ours_and_gone(entry, PRIVATE_FOLDER):
            shutil.rmtree(entry.path, ignore_errors=True)
            removed.append(entry.path)
    return removed


def sweep_acf_folder(acf_path) -> list[str]:
    """Remove, beside the ACF, the temporary files of writers that are gone
    (`.NAME.PID.XXXX.tmp`, `.nvcc-evo-candidate-PID.acf`); the paths removed."""
    folder, name = os.path.split(os.path.realpath(acf_path))      # (a linked ACF is written at its target)
    patterns = (_temporary_file(name), CANDIDATE_ACF)
    removed = []
    try:
        entries = list(os.scandir(folder or "."))
    except OSError:
        return removed
    for entry in entries:
        if entry.is_file(follow_symlinks=False) and any(_ours_and_gone(entry, p) for p in patterns):
            try:
                os.unlink(entry.path)
                removed.append(entry.path)
            except OSError:
                pass
    return removed


def sweep_for(acf_path) -> list[str]:
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
# Who starts the groups of this thread's work (a compile pool, say): `kill_running(owner)` kills only
# those, so that one search cancelling its compiles leaves another's running (several tasks at once).
OWNER: contextvars.ContextVar = contextvars.ContextVar("nvcc_evo_group_owner", default=None)


def _die_with_parent():
    """A preexec function that has the child's guard sent SIGTERM when this
    thread's process dies (Linux prctl PR_SET_PDEATHSIG); None elsewhere."""
    try:
        import ctypes
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    parent = os.getpid()

    def arm() -> None:
        prctl(1, signal.SIGTERM, 0, 0, 0)       # 1: PR_SET_PDEATHSIG
        if os.getppid() != parent:             # the parent died before it was armed
            os._exit(143)
    return arm


def kill_group(process: subprocess.Popen) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except OSError:
        pass


def kill_running(owner=None) -> None:
    """Kill every group started here that is still running (on an
    interrupt), or only those `owner` started (see OWNER)."""
    with _running_lock:
        running = [process for process, whose in _running.items() if owner is None or whose is owner]
    for process in running:
        kill_group(process)


def run_in_group(argv: list[str], cwd=None, env=None, timeout: float | None = None) -> Finished:
    """Run `argv` in a process group (and session) of its own, output
    captured, stdin empty; its whole group is killed at the timeout, on an
    exception here (an interrupt), and when this process dies."""
    process = subprocess.Popen([SHELL, "-c", GUARD, "nvcc-evo-group", *argv], cwd=cwd, env=env,
                               stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, start_new_session=True, preexec_fn=_die_with_parent())
    with _running_lock:
        _running[process] = OWNER.get()
    try:
        stdout, stderr = process.communicate(timeout=timeout)
        return Finished(process.returncode, stdout, stderr)
    except subprocess.TimeoutExpired:
        kill_group(process)
        try:
            stdout, stderr = process.communicate(timeout=10)
        except subprocess.TimeoutExpired:          # something left the group and holds the pipes
            process.wait()
            stdout, stderr = "", ""
        return Finished(None, stdout or "", stderr or "")
    except BaseException:
        kill_group(process)
        process.wait()
        raise
    finally:
        with _running_lock:
            _running.pop(process, None)
