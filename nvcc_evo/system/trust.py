"""Whose files nvcc-evo acts on: an ACF or a settings file found by walking up
from the working folder (or an input's) may lie in a folder others may write,
as /tmp does, and a settings file names programs a build runs (`nvcc`,
`ptxas`). Such a file is used only when

- it is owned by the user running nvcc-evo, or by root, and
- the folder it lies in is the user's own, or no one else may write it
  (owned by the user or root, no group or other write bit);

or when the user trusts its folder on purpose: NVCC_EVO_TRUST (folders
separated by ':', or '*' for all) or one folder a line in the user's own
`~/.config/nvcc-evo/trusted` ($XDG_CONFIG_HOME). A trusted folder covers the
folders below it. A file named on purpose (`--acf`, NVCC_EVO_ACF) is trusted
as given. (git's safe.directory is the model.)

A few stats, no import beyond os: the compile path asks this for every build
that finds an ACF.
"""
from __future__ import annotations

import os

TYPE_CHECKING = False
if TYPE_CHECKING:          # (the compile path imports neither typing nor collections.abc)
    from collections.abc import Mapping

TRUST_ENV = "NVCC_EVO_TRUST"


def trust_file() -> str | None:
    """The user's own list of trusted folders (None without a home)."""
    base = os.environ.get("XDG_CONFIG_HOME")
    if not base:
        home = os.path.expanduser("~")
        if not os.path.isabs(home):
            return None
        base = os.path.join(home, ".config")
    return os.path.join(base, "nvcc-evo", "trusted")


def _listed(environ: Mapping[str, str]) -> list[str]:
    folders = [f for f in environ.get(TRUST_ENV, "").split(os.pathsep) if f]
    listing = trust_file()
    if listing:
        try:
            if os.stat(listing).st_uid in (os.geteuid(), 0):  # the list itself must be the user's
                with open(listing, encoding="utf-8", errors="replace") as handle:
                    folders += [line.strip()
                                for line in handle if line.strip() and not line.startswith("#")]
        except OSError:
            pass
    return folders


def trusted_on_purpose(path: str, environ: Mapping[str, str]) -> bool:
    folder = os.path.realpath(os.path.dirname(os.path.abspath(path)))
    for listed in _listed(environ):
        if listed == "*":
            return True
        listed = os.path.realpath(os.path.expanduser(listed))
        if folder == listed or folder.startswith(listed.rstrip(os.sep) + os.sep):
            return True
    return False


def _owner_problem(path: str, uid: int) -> str:
    info = os.stat(path)
    if info.st_uid not in (uid, 0):
        return f"it is owned by uid {info.st_uid}, not by you (uid {uid}) nor root"
    folder = os.path.dirname(os.path.abspath(path)) or "."
    place = os.stat(folder)
    if place.st_uid == uid:
        return ""
    if place.st_uid != 0:
        return f"its folder {folder} belongs to uid {place.st_uid}, who may replace it"
    if place.st_mode & 0o022:
        return f"its folder {folder} may be written by others (mode {place.st_mode & 0o7777:04o})"
    return ""


def untrusted(path: str | os.PathLike[str], environ: Mapping[str, str] = os.environ) -> str:
    """Why the file found at `path` is not used ("" when it is trusted):
    whose it is, and how to trust it."""
    path = os.fspath(path)
    try:
        why = _owner_problem(path, os.geteuid())
    except OSError:
        return ""                         # unreadable: the reader says why
    if not why or trusted_on_purpose(path, environ):
        return ""
    folder = os.path.realpath(os.path.dirname(os.path.abspath(path)))
    listing = trust_file()
    where = f" or add it to {listing}" if listing else ""
    return (f"{path} is not used: {why}; if you trust it, set {TRUST_ENV}={folder}{where} "
            "(or name the ACF with --acf or NVCC_EVO_ACF)")
