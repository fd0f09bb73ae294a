"""The one way nvcc-evo creates and writes its own files (lock files, the
results store, reports, the compile database, caches, the log, temporaries):
no link is followed and nothing but a regular file is written.

A cloned repository may hold links where nvcc-evo's files belong
(`.nvcc-evo/results.jsonl -> ../../thesis.txt`); a shared temporary folder may
hold another user's. Each file is opened with O_NOFOLLOW (O_EXCL where it must
be new), each folder nvcc-evo makes is checked to be a folder and no link, and
a link or a non-regular file in the way is a `Refused` error naming it: its
target is never touched. (A user's ACF is another matter: nvcc_evo.acf.edit.write
writes it through its link on purpose.)

Imports: the standard library only (the compile path uses it).
"""
from __future__ import annotations

import errno
import os
import stat

NOFOLLOW = os.O_NOFOLLOW | os.O_CLOEXEC
STATE = ".nvcc-evo"          # a project's state folder, beside its ACF
GITIGNORE = "# made by nvcc-evo: its records, caches and results are this machine's\n*\n"


class Refused(OSError):
    """A link, or something not a regular file (a folder, a FIFO), where nvcc-evo writes."""

    def __init__(self, path: str | os.PathLike[str], what: str):
        super().__init__(errno.ELOOP, f"{path} {what}", str(path))    # (the path: a folder above
                                                                      # the file, too)

    def __str__(self) -> str:
        return self.strerror or ""             # (always the message given)


def _refuse(path: str | os.PathLike[str], mode: int, wanted: str = "a regular file") -> Refused:
    """Why what is at `path` (of this mode) is refused where `wanted` belongs."""
    if stat.S_ISLNK(mode):
        try:
            target = f" to {os.readlink(path)}"
        except OSError:
            target = ""
        return Refused(path, f"is a symbolic link{target}; nvcc-evo writes through no link (its "
                             "target is left as it is): remove the link")
    if stat.S_ISDIR(mode) and wanted != "a folder":
        return Refused(path, "is a folder")
    return Refused(path, f"is not {wanted} ({kind_of(mode)})")


def kind_of(mode: int) -> str:
    """What a file of this mode is, in words."""
    if stat.S_ISREG(mode):
        return "a regular file"
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "a FIFO, device or socket"


def not_regular(path: str | os.PathLike[str]) -> str | None:
    """What is at `path` (links followed) when it is there and no regular file
    ("a FIFO", "a folder", ...); None for a regular file or nothing there."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return None
    return None if stat.S_ISREG(mode) else kind_of(mode)


def folder(path: str | os.PathLike[str], private: bool = False) -> str:
    """The folder at `path`, made if missing (its parent must exist; 0700 when
    `private`); a link or a file there is Refused. Returns `path` as a str.
    A project's state folder (STATE) is made with a `.gitignore` of `*` in it,
    as pytest and mypy make their caches: its records are this machine's, and
    git leaves it out (a user who deletes that file to share it is not
    overruled: it is written only where the folder is made)."""
    path = os.fspath(path)
    try:
        os.mkdir(path, 0o700 if private else 0o777)
    except FileExistsError:
        pass
    else:
        if os.path.basename(path) == STATE:
            _ignored_by_git(path)
    mode = os.lstat(path).st_mode
    if not stat.S_ISDIR(mode):
        raise _refuse(path, mode, "a folder")
    return path


def _ignored_by_git(path: str) -> None:
    """`path/.gitignore` of `*`, new (another process's, just made, is kept)."""
    try:
        fd = os.open(os.path.join(path, ".gitignore"), os.O_WRONLY | os.O_CREAT | os.O_EXCL
                     | NOFOLLOW, 0o644)
    except OSError:
        return
    try:
        os.write(fd, GITIGNORE.encode())
    finally:
        os.close(fd)


def folders(root: str | os.PathLike[str], *names: str, private: bool = False) -> str:
    """`root/names...`, each folder below `root` made and checked by `folder`
    (`root` itself is the user's: made with its parents if missing, links allowed)."""
    path = os.fspath(root)
    os.makedirs(path, exist_ok=True)
    for name in names:
        path = folder(os.path.join(path, name), private)
    return path


def open_regular(path: str | os.PathLike[str], flags: int, mode: int = 0o644) -> int:
    """os.open with O_NOFOLLOW; the file must be a regular one (a FIFO is
    opened without blocking first, so that it is refused, not waited on)."""
    path = os.fspath(path)
    try:
        fd = os.open(path, flags | NOFOLLOW | os.O_NONBLOCK, mode)
    except OSError as error:
        if error.errno in (errno.ELOOP, errno.EISDIR, errno.ENXIO):
            try:
                raise _refuse(path, os.lstat(path).st_mode) from None
            except FileNotFoundError:
                pass
        raise
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        raise _refuse(path, info.st_mode)
    os.set_blocking(fd, True)
    return fd


def check_regular(path: str | os.PathLike[str]) -> None:
    """Refused when something other than a regular file is at `path` (nothing there is fine)."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    if not stat.S_ISREG(mode):
        raise _refuse(path, mode)


def require_regular_file(path: str | os.PathLike[str]) -> None:
    """OSError unless `path` is a regular file: a folder, or a FIFO or device
    (a read would hang, or /dev/zero never end), is not an input (an ACF)."""
    mode = os.stat(path).st_mode
    if stat.S_ISDIR(mode):
        raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), str(path))
    if not stat.S_ISREG(mode):
        raise OSError(errno.EINVAL, "not a regular file", str(path))


def read_regular(path: str | os.PathLike[str]) -> bytes:
    """The bytes of the regular file at `path` (see require_regular_file)."""
    require_regular_file(path)
    with open(path, "rb") as handle:
        return handle.read()


def replace(path: str | os.PathLike[str], data: str | bytes, mode: int = 0o644) -> None:
    """Write a whole file by a new temporary beside it (O_EXCL: never an
    existing name) and one rename, so readers see the old file or the new one;
    a link or a non-regular file at `path` is Refused; the temporary goes if
    anything fails."""
    path = os.fspath(path)
    check_regular(path)
    if isinstance(data, str):
        data = data.encode()
    tmp = f"{path}.{os.getpid()}.{os.urandom(4).hex()}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | NOFOLLOW, mode)
    try:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def append(path: str | os.PathLike[str], data: str | bytes, mode: int = 0o644,
           whole_lines: bool = False,
           sync: bool = False) -> None:
    """Append `data` to the regular file at `path` (made if missing), never through a link.
    `whole_lines`: a last line cut short (kill -9, a full disk) is ended first, so that it never
    swallows this one (a single step only under the caller's lock: system.jsonlines);
    `sync`: on disk before this returns."""
    fd = open_regular(path, (os.O_RDWR if whole_lines else os.O_WRONLY) | os.O_APPEND | os.O_CREAT,
                      mode)
    try:
        view = memoryview(data.encode() if isinstance(data, str) else data)
        if whole_lines and _ends_torn(fd):
            view = memoryview(b"\n" + bytes(view))
        while view:
            view = view[os.write(fd, view):]
        if sync:
            os.fsync(fd)
    finally:
        os.close(fd)


def _ends_torn(fd: int) -> bool:
    size = os.fstat(fd).st_size
    return size > 0 and os.pread(fd, 1, size - 1) != b"\n"


def cache_folder() -> str:
    """The user's cache folder, made and checked: $XDG_CACHE_HOME/nvcc-evo,
    else ~/.cache/nvcc-evo. Without a home (HOME unset and no passwd entry for
    the uid) a private folder of the temporary folder, said once (when it is
    made); one of another user there, or open to others, is Refused."""
    base = os.environ.get("XDG_CACHE_HOME")
    if not base:
        home = os.path.expanduser("~")
        if os.path.isabs(home) and home != "/":
            base = os.path.join(home, ".cache")
    if base:
        return folders(base, "nvcc-evo")
    import sys
    import tempfile
    uid = os.getuid()
    path = os.path.join(tempfile.gettempdir(), f"nvcc-evo-cache-{uid}")
    made = not os.path.lexists(path)
    folder(path, private=True)
    info = os.lstat(path)
    if info.st_uid != uid or info.st_mode & 0o077:
        raise Refused(path, f"is not a private folder of uid {uid} (owner {info.st_uid}, mode "
                            f"{info.st_mode & 0o7777:04o})")
    if made:
        print(f"nvcc-evo: note: no home folder (HOME unset, no passwd entry for uid {uid}): caches "
              f"are kept in {path}; set XDG_CACHE_HOME to keep them elsewhere", file=sys.stderr)
    return path


def leaves(path: str, folder: str) -> str:
    """How `path` (as a project's file names it: relative to `folder`) leads
    out of `folder`, in words: an absolute path, `..` out of it, a link out
    of it; "" when it stays inside (a project's own files may name only
    files inside the project for nvcc-evo to write)."""
    if os.path.isabs(path) or path.startswith("~"):
        return "an absolute path"
    joined = os.path.join(os.path.abspath(folder), path)
    if not _under(os.path.normpath(joined), os.path.abspath(folder)):
        return "'..' leads out of it"
    if not _under(os.path.realpath(joined), os.path.realpath(folder)):
        return "a link leads out of it"
    return ""


def _under(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)
