"""Which files a unit's globs name: the one matcher of the build (which unit
covers an input), the search (which file a unit never built is compiled
from) and the check (which globs are allowed).

Paths stay inside the ACF's folder. A glob is relative to it, with `/`
between folders, and matches path segments: `*`, `?` and `[...]` never
cross a `/`, and a whole segment `**` stands for any number of folders
(none included): `src/**/*.cu`; last, it names every file below: `src/**`. An absolute glob or a
`..` segment is an error of the check; a file is seen by its real path (symlinks followed), and
one that lies outside the folder matches nothing. Only os, re and fnmatch:
the compile path uses it.
"""
from __future__ import annotations

import fnmatch
import os
import re

TYPE_CHECKING = False
if TYPE_CHECKING:          # (the compile path imports neither typing nor collections.abc)
    from collections.abc import Iterable, Iterator

ANY_FOLDERS = "**"
MAGIC = re.compile(r"[*?\[]")
# Characters a shell still reads inside double quotes, where nvcc puts a
# file's name on the command lines of its steps: the search never compiles
# a file so named on its own (a build that names it does so itself).
SHELL_ACTIVE = re.compile(r'[$`\\"\n]')


def segments(glob: str) -> tuple[str, ...]:
    """The glob's folder and file patterns (`.` and empty segments dropped)."""
    return tuple(part for part in glob.split("/") if part not in ("", "."))


def path_problem(path: str, what: str = "unit path") -> str | None:
    """Why a path named in an ACF leaves its folder (None when it does not)."""
    if path.startswith("/") or re.match(r"[A-Za-z]:[\\/]", path):
        return f"{what} '{path}' must be relative to the ACF's folder"
    if ".." in path.replace("\\", "/").split("/"):
        return f"{what} '{path}' leaves the ACF's folder ('..'); paths stay inside it"
    return None


def glob_problem(glob: str) -> str | None:
    """Why a unit may not have this glob (None when it may)."""
    problem = path_problem(glob)
    if problem is None and not segments(glob):
        return f"unit path '{glob}' names no file"
    return problem


def inside(path: str | os.PathLike[str], folder: str | os.PathLike[str]) -> tuple[str, ...] | None:
    """`path`'s segments relative to `folder`, both by their real paths;
    None when it lies outside (or is the folder itself)."""
    try:
        relative = os.path.relpath(os.path.realpath(path), os.path.realpath(folder))
    except ValueError:           # another drive
        return None
    parts = tuple(relative.split(os.sep))
    if parts[0] in (os.pardir, os.curdir):
        return None
    return parts


def _matches(pattern: tuple[str, ...], parts: tuple[str, ...]) -> bool:
    if not pattern:
        return not parts
    head, rest = pattern[0], pattern[1:]
    if head == ANY_FOLDERS:
        return any(_matches(rest, parts[i:]) for i in range(len(parts) + 1))
    return bool(parts) and _segment(parts[0], head) and _matches(rest, parts[1:])


def _segment(name: str, pattern: str) -> bool:
    # A literal segment (most unit globs name their file) is compared as it is:
    # fnmatch compiles a regular expression per pattern, per process, so a build
    # against an ACF of 20000 units spent 10 s there.
    if "*" not in pattern and "?" not in pattern and "[" not in pattern:
        return name == pattern
    return fnmatch.fnmatchcase(name, pattern)


def matches(glob: str, parts: tuple[str, ...] | None) -> bool:
    """Whether a file (its segments from `inside`) is named by `glob`."""
    return parts is not None and glob_problem(glob) is None and _matches(segments(glob), parts)


def covers(globs: Iterable[str], path: str | os.PathLike[str],
           folder: str | os.PathLike[str]) -> bool:
    """Whether any of `globs` (relative to `folder`) names the file at `path`."""
    parts = inside(path, folder)
    return any(matches(glob, parts) for glob in globs)


def _walk(folder: str, pattern: tuple[str, ...]) -> Iterator[str]:
    """Files under `folder` whose relative path matches `pattern`, found
    segment by segment (a literal segment is looked up, not listed)."""
    head, rest = pattern[0], pattern[1:]
    if head == ANY_FOLDERS:         # (linked folders are not entered: no loops, nothing outside)
        if rest:
            yield from _walk(folder, rest)
        for entry in _entries(folder):
            if entry.is_dir(follow_symlinks=False):
                yield from _walk(entry.path, pattern)
            elif not rest and entry.is_file():
                yield entry.path
        return
    if not MAGIC.search(head):
        path = os.path.join(folder, head)
        if rest and os.path.isdir(path):
            yield from _walk(path, rest)
        elif not rest and os.path.isfile(path):
            yield path
        return
    for entry in _entries(folder):
        if not fnmatch.fnmatchcase(entry.name, head):
            continue
        if rest and entry.is_dir():
            yield from _walk(entry.path, rest)
        elif not rest and entry.is_file():
            yield entry.path


def _entries(folder: str) -> list:
    try:
        return sorted(os.scandir(folder), key=lambda entry: entry.name)
    except OSError:
        return []


def files(globs: Iterable[str], folder: str | os.PathLike[str]) -> list[str]:
    """The files inside `folder` that `globs` name, as the build matches
    them (real paths inside the folder), sorted; none with a name a shell
    would read into (inside the folder: the folder's own name is the user's)."""
    found: set[str] = set()
    for glob in globs:
        if glob_problem(glob) is None:
            found.update(path for path in _walk(str(folder), segments(glob))
                         if covers(globs, path,
                                   folder) and not SHELL_ACTIVE.search(os.path.relpath(path,
                                                                                       folder)))
    return sorted(found)
