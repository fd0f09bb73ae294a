"""Writes to a user's ACF that keep the file (`--retune`, `--acf-fmt`).

- the write goes through a symlink to its target (the link stays a link);
- it is atomic: a temporary file `.{name}.{pid}.{random}.tmp` beside the
  target, synced, then one rename, so a `make -j` reading the ACF sees the old
  file or the new one; the temporary goes if anything fails;
- mode and ownership are kept (ownership where the writer may set it: root
  or the owner), and so are CRLF line endings and a BOM (AcfText.encode);
- a read-only file or folder is a NotWritable error, never replaced;
- `rewrite` is one read-modify-write under the file's lock (locks.locked, a
  lock file in `.nvcc-evo/locks/` beside it that only its writers may open,
  so nvcc-evo's writers take turns). An editor takes no lock, and one that
  saves in place (truncate, write, pause, write: nano, `cat >`, `cp` over it)
  shows a half-saved text meanwhile, which may parse. So the text is read only
  once the file is settled (`settle`: no process holds it open for writing,
  asked of the kernel by a read lease; where no lease can be taken, a file
  unchanged for `STILL` seconds), the update is redone on the new text when the
  file changed between the read and the rename, and the file the rename
  replaced is kept open and looked at after it: a save that went into it
  (begun before the rename, ended after) is waited for and the update redone
  on its final text. An old text is never put back over a newer one, and a
  half-saved text is never made permanent.
"""
from __future__ import annotations

import errno
import fcntl
import os
import signal
import tempfile
import time
from pathlib import Path
from typing import Callable, NamedTuple

from nvcc_evo.acf.text import AcfText, decode
from nvcc_evo.errors import AcfChanged, EvoError, NotWritable
from nvcc_evo.system.locks import Wait, hold, lock_for, locked

ATTEMPTS = 20            # saves by an editor in a row before giving up
STILL = 2.0  # seconds unchanged that make a file settled where no lease tells of its writers
SETTLE_LIMIT = 60.0      # seconds a file may keep changing before the write gives up
POLL = 0.02


def writable(path: str | Path) -> Path:
    """The file a write to `path` lands in (a symlink's target), after checking
    that it and its folder may be written. No write bit at all counts as
    read-only for root too: someone made it so on purpose."""
    real = Path(os.path.realpath(path))
    shown = f"{path}" + (f" (a link to {real})" if str(real) != os.path.abspath(path) else "")
    for place, what in ((real, "it is read-only"), (real.parent, f"its folder {real.parent} is "
                                                                 "read-only")):
        if place == real and not real.exists():
            continue                           # a new file: only its folder matters
        mode = place.stat().st_mode
        if not os.access(place, os.W_OK) or not mode & 0o222:
            raise NotWritable(f"cannot write {shown}: {what} (mode {mode & 0o7777:04o}); left "
                              "as it is")
    return real


def _new_file_mode() -> int:
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


def _temporary(real: Path, data: bytes, like: os.stat_result | None) -> tuple[str, int]:
    """`data` in a synced temporary file beside `real` with its mode and owner
    (`like`: the file it replaces, None for a new file), and an fd holding
    its lock (a sweep of another run leaves a locked temporary alone)."""
    fd, tmp = tempfile.mkstemp(prefix=f".{real.name}.{os.getpid()}.", suffix=".tmp",
                               dir=real.parent)
    held = hold(fd)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
            out.flush()
            os.fchmod(out.fileno(), like.st_mode & 0o7777 if like else _new_file_mode())
            if like and (like.st_uid, like.st_gid) != (os.geteuid(), os.getegid()):
                try:
                    os.fchown(out.fileno(), like.st_uid, like.st_gid)
                except PermissionError:        # not root, not the owner: keep the group if we may
                    try:
                        os.fchown(out.fileno(), -1, like.st_gid)
                    except PermissionError:
                        pass
            os.fsync(out.fileno())
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        os.close(held)
        raise
    return tmp, held


def _replace(real: Path, data: bytes, unchanged: Callable[[], bool] = lambda: True) -> int | None:
    """Put `data` at `real` by one rename, if `unchanged()` still holds just
    before it: an fd on the new file (the caller closes it), None (nothing
    written) if it does not hold."""
    tmp, held = _temporary(real, data, real.stat() if real.exists() else None)
    try:
        if not unchanged():
            os.close(held)
            return None
        os.replace(tmp, real)
        return held
    except BaseException:
        os.close(held)
        raise
    finally:
        Path(tmp).unlink(missing_ok=True)


def write_atomic(path: str | Path, text: str, spelling: AcfText | None = None) -> None:
    """Replace the ACF at `path` with `text` ("\\n" endings), spelled as
    `spelling` says (default: as the file is now: its line endings, its BOM)."""
    real = writable(path)
    if spelling is None:
        spelling = decode(real.read_bytes(), str(path)) if real.exists() else AcfText("")
    held = _replace(real, spelling.encode(text))
    if held is not None:
        os.close(held)


class _State(NamedTuple):
    """What tells that an open file was written to: its size and time of
    change (not its ctime: the rename that replaces it changes that)."""

    size: int
    mtime_ns: int

    @classmethod
    def of(cls, fd: int) -> "_State":
        info = os.fstat(fd)
        return cls(info.st_size, info.st_mtime_ns)


def being_written(fd: int) -> bool | None:
    """Whether some process holds the file open for writing (an editor in the
    middle of a save): a read lease is refused then. None where no lease can
    be taken (a file of another user, a network file system)."""
    try:
        # A writer's open breaks the lease in the instant it is held, with a signal to this process:
        # SIGURG, which does nothing, not the default SIGIO, which would end it.
        fcntl.fcntl(fd, fcntl.F_SETSIG, signal.SIGURG)
        fcntl.fcntl(fd, fcntl.F_SETLEASE, fcntl.F_RDLCK)
    except OSError as error:
        return True if error.errno in (errno.EAGAIN, errno.EBUSY) else None
    fcntl.fcntl(fd, fcntl.F_SETLEASE, fcntl.F_UNLCK)
    return False


def settle(fd: int, path: str | Path) -> _State:
    """Wait until the open file is settled: no process holds it open for
    writing, or (where that cannot be told, or a program keeps it open
    without writing) it has not changed for STILL seconds. Its state then;
    AcfChanged if it keeps changing for SETTLE_LIMIT seconds."""
    start = time.monotonic()
    state, since = _State.of(fd), start
    if time.time_ns() - state.mtime_ns >= STILL * 1e9:
        since -= STILL                         # unchanged since long before this look
    while True:
        if being_written(fd) is False or time.monotonic() - since >= STILL:
            now = _State.of(fd)
            if now == state:
                return state
        time.sleep(POLL)
        now = _State.of(fd)
        if now != state:
            state, since = now, time.monotonic()
        if time.monotonic() - start > SETTLE_LIMIT:
            raise AcfChanged(f"{path} kept changing for {SETTLE_LIMIT:g} s while nvcc-evo waited "
                             "to write it; not written")


def rewrite(path: str | Path, update: Callable[[str], str], wait: Wait = Wait()) -> bool:
    """One locked read-modify-write of the ACF at `path`: `update(text)` gets
    the text as it is now, settled, and returns the new one (it may raise,
    and is called again if an editor saved meanwhile). True when the file
    changed. Another nvcc-evo writing it is waited for as `wait` says
    (locks.Busy when it does not end)."""
    real = writable(path)
    with locked(real, lock_for(real), wait,
                f"another nvcc-evo is writing {path}"), _Files(real) as files:
        for _ in range(ATTEMPTS):
            before = settle(files.base, path)
            try:
                current = decode(_read(files.base), str(path))
                new = update(current.text)
            except EvoError:
                if _State.of(files.base) != before:
                    continue  # a save began as it was read: the update sees its text, once settled
                raise
            if new == current.text and files.written is None:
                return False
            if not files.put(current.encode(new), before):
                continue  # saved meanwhile (in place, or renamed over): redone on the new text
            if _State.of(files.base) == before and being_written(files.base) is not True:
                return True
            # An in-place save began before the rename and goes on in the file the rename replaced:
            # its final text is there; the update is redone on it once it is settled.
    raise AcfChanged(f"{path} changed {ATTEMPTS} times while nvcc-evo was writing it; not written")


class _Files:
    """The two files of a rewrite, held open: `base`, whose text the update
    starts from (the file at the path; after a save raced the rename, the
    file the rename replaced, which the save went on writing), and
    `written`, what this rewrite put at the path (None before it did)."""

    def __init__(self, real: Path):
        self.real = real
        self.base = os.open(real, os.O_RDONLY | os.O_CLOEXEC)
        self.written: int | None = None
        self.mine = _State(0, 0)          # the state `written` had when this rewrite wrote it

    def __enter__(self) -> "_Files":
        return self

    def __exit__(self, *exc: object) -> None:
        os.close(self.base)
        self._forget_written()

    def put(self, data: bytes, before: _State) -> bool:
        """`data` at the path, if nobody wrote meanwhile to `base` (`before`:
        its state when read) nor to what is at the path; False if someone did."""
        placed = _replace(self.real, data,
                          lambda: _State.of(self.base) == before and self._ours_in_place())
        if placed is None:
            if not self._ours_in_place():            # a newer save at the path: start again from it
                os.close(self.base)
                self.base = os.open(self.real, os.O_RDONLY | os.O_CLOEXEC)
                self._forget_written()
            return False
        self._forget_written()
        self.written, self.mine = placed, _State.of(placed)
        return True

    def _ours_in_place(self) -> bool:
        """Whether the path holds what this rewrite expects there, unchanged:
        `base` before the first write, then what it wrote."""
        if self.written is None:
            return _is_at(self.base, self.real)
        return _is_at(self.written, self.real) and _State.of(self.written) == self.mine

    def _forget_written(self) -> None:
        if self.written is not None:
            os.close(self.written)
            self.written = None


def _read(fd: int) -> bytes:
    chunks: list[bytes] = []
    offset = 0
    while True:
        chunk = os.pread(fd, 1 << 20, offset)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)
        offset += len(chunk)


def _is_at(fd: int, path: Path) -> bool:
    """Whether the open file is the one at `path` now."""
    try:
        there, held = os.stat(path), os.fstat(fd)
    except OSError:
        return False
    return (there.st_dev, there.st_ino) == (held.st_dev, held.st_ino)
