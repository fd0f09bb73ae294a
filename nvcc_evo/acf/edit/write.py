"""Writes to a user's ACF that keep the file (`--retune`, `--acf-fmt`).

- the write goes through a symlink to its target (the link stays a link);
- it is atomic: a temporary file `.{name}.{pid}.{random}.tmp` beside the
  target, synced, then one rename, so a `make -j` reading the ACF sees the old
  file or the new one; the temporary goes if anything fails;
- mode and ownership are kept (ownership where the writer may set it: root
  or the owner), and so are CRLF line endings and a BOM (AcfText.encode);
- a read-only file or folder is a NotWritable error, never replaced;
- `rewrite` is one read-modify-write under the file's lock (locks.file_lock,
  so nvcc-evo's writers take turns) and, since an editor takes no lock, it
  redoes the update on the new text when the file changed between the read
  and the rename: an old text is never put back over a newer one.
"""
from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Callable

from nvcc_evo.acf.text import AcfText, decode
from nvcc_evo.errors import AcfChanged, NotWritable
from nvcc_evo.system.locks import file_lock, hold

ATTEMPTS = 20            # saves by an editor in a row before giving up


def writable(path: str | Path) -> Path:
    """The file a write to `path` lands in (a symlink's target), after checking
    that it and its folder may be written. No write bit at all counts as
    read-only for root too: someone made it so on purpose."""
    real = Path(os.path.realpath(path))
    shown = f"{path}" + (f" (a link to {real})" if str(real) != os.path.abspath(path) else "")
    for place, what in ((real, "it is read-only"), (real.parent, f"its folder {real.parent} is read-only")):
        if place == real and not real.exists():
            continue                           # a new file: only its folder matters
        mode = place.stat().st_mode
        if not os.access(place, os.W_OK) or not mode & 0o222:
            raise NotWritable(f"cannot write {shown}: {what} (mode {mode & 0o7777:04o}); left as it is")
    return real


def _new_file_mode() -> int:
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


def _temporary(real: Path, data: bytes, like: os.stat_result | None) -> tuple[str, int]:
    """`data` in a synced temporary file beside `real` with its mode and owner
    (`like`: the file it replaces, None for a new file), and an fd holding
    its lock (a sweep of another run leaves a locked temporary alone)."""
    fd, tmp = tempfile.mkstemp(prefix=f".{real.name}.{os.getpid()}.", suffix=".tmp", dir=real.parent)
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


def _replace(real: Path, data: bytes, unchanged: Callable[[], bool] = lambda: True) -> bool:
    """Put `data` at `real` by one rename, if `unchanged()` still holds just
    before it; False (nothing written) if it does not."""
    tmp, held = _temporary(real, data, real.stat() if real.exists() else None)
    try:
        if not unchanged():
            return False
        os.replace(tmp, real)
        return True
    finally:
        Path(tmp).unlink(missing_ok=True)
        os.close(held)


def write_atomic(path: str | Path, text: str, spelling: AcfText | None = None) -> None:
    """Replace the ACF at `path` with `text` ("\\n" endings), spelled as
    `spelling` says (default: as the file is now: its line endings, its BOM)."""
    real = writable(path)
    if spelling is None:
        spelling = decode(real.read_bytes(), str(path)) if real.exists() else AcfText("")
    _replace(real, spelling.encode(text))


def rewrite(path: str | Path, update: Callable[[str], str]) -> bool:
    """One locked read-modify-write of the ACF at `path`: `update(text)` gets
    the text as it is now and returns the new one (it may raise, and is
    called again if an editor saved meanwhile). True when the file changed."""
    real = writable(path)
    with file_lock(real):
        for _ in range(ATTEMPTS):
            data = real.read_bytes()
            current = decode(data, str(path))
            new = update(current.text)
            if new == current.text:
                return False
            if _replace(real, current.encode(new), lambda: real.read_bytes() == data):
                return True
    raise AcfChanged(f"{path} changed {ATTEMPTS} times while nvcc-evo was writing it; not written")
