"""The build step of a candidate's run: the project's outputs re-dated so
that its build compiles the candidate again, and the wrapper's log of the
run read to see that the unit was compiled with the candidate's flags."""
from __future__ import annotations

import json
import os
import stat
from collections.abc import Iterable
from pathlib import Path

from nvcc_evo.driver.cmdline.flags import ptxas_values
from nvcc_evo.driver.match.units import unit_outputs
from nvcc_evo.status import Status
from nvcc_evo.system.files import append

LONG_AGO = 86400.0  # what re-dated outputs are stamped with (1970-01-02): older than any source
# How a compile's output begins (an object, cubin or program: ELF; a library: ar; a fatbinary), and
# a PTX file's version line: what an output outside the project must be to be re-dated.
COMPILED = (b"\x7fELF", b"!<arch>\n", b"\x50\xed\x55\xba")
PTX_VERSION = b"\n.version "
NOT_REBUILT = ("no compile of unit {} for {} went through nvcc-evo during the run: the build "
               "skipped it (nvcc-evo re-dates the outputs the compile database knows: build it "
               "once through nvcc-evo first), or does not use nvcc-evo as its compiler "
               "(NVCC=nvcc-evo, CMAKE_CUDA_COMPILER)")
KERNEL_NOT_REBUILT = ("no compile of kernel unit {} for {} went through nvcc-evo-ptxas during the "
                      "run: the program took the kernel from a cache it sets itself "
                      "(TRITON_CACHE_DIR, TORCHINDUCTOR_CACHE_DIR; the run is given empty ones), "
                      "names another ptxas (TRITON_PTXAS_PATH, TRITON_PTXAS_BLACKWELL_PATH), or no "
                      "longer compiles that kernel for this architecture")


def redate(paths: list[Path], project: Path) -> None:
    """Make a build system see these outputs (the compile database's) as older than their sources.
    The database is the project's (a cloned repository may carry one): a path is re-dated only
    where it is a regular file of the user's, no link, and lies inside the `project` folder or
    (an out-of-tree build folder's) begins as a compile's output does."""
    inside = os.path.realpath(project).rstrip(os.sep) + os.sep
    for path in paths:
        if _compile_output(path, inside):
            os.utime(path, (LONG_AGO, LONG_AGO), follow_symlinks=False)


def _compile_output(path: Path, inside: str) -> bool:
    try:
        info = os.lstat(path)
        if not stat.S_ISREG(info.st_mode) or info.st_uid != os.geteuid():
            return False
        if os.path.realpath(path).startswith(inside):
            return True
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            head = os.read(fd, 4096)
        finally:
            os.close(fd)
    except OSError:                       # gone, or unreadable: nothing to re-date
        return False
    return head.startswith(COMPILED) or (head.startswith(b"//") and PTX_VERSION in head)


def leave_stale(acf_path: Path, globs: tuple[str, ...], arch: str) -> None:
    """The unit's outputs the compile database knows re-dated (those of the records that build
    it: a unit `--hot --write` added is built from what the unit that recorded it saw): the next
    build compiles them again (a candidate's, or the user's, from what the ACF says)."""
    redate(unit_outputs(acf_path, globs, arch), acf_path.parent)


def _tokens(flags: Iterable[str]) -> set[str]:
    """A flag list as comparable options: each -Xptxas value on its own."""
    flags = tuple(flags)
    rest = [f for i, f in enumerate(flags)
            if f != "-Xptxas" and not (i and flags[i - 1] == "-Xptxas")]
    return set(ptxas_values(flags)) | set(rest)


def flags_problem(log_lines: list[dict], globs: tuple[str, ...], arch: str, flags: tuple[str, ...],
                  must_build: bool, kernel: bool = False) -> tuple[Status | None, str]:
    """(status, why) when the wrapper's log of a run does not show the unit
    compiled with the candidate's flags; (None, "") when it does. A run that
    need not build may compile nothing, but what it compiles must be the candidate.
    `kernel`: a kernel unit, compiled by the program's Triton through the drop-in ptxas."""
    mine = []
    for line in log_lines:
        for unit in line.get("units", ()):
            if tuple(unit.get("unit", ())) == tuple(globs) and unit.get("arch") == arch:
                mine.append((line, unit.get("input")))
    if not mine:
        if not must_build:
            return None, ""
        said = KERNEL_NOT_REBUILT if kernel else NOT_REBUILT
        return Status.NOT_REBUILT, said.format(' '.join(globs), arch)
    wanted = _tokens(flags)
    for line, name in mine:
        got = _tokens(line.get("added", ()))
        for step in line.get("ptxas_per_step", ()):
            if step.get("input") == name and step.get("arch") == arch:
                got |= set(step.get("options", ()))
        missing = sorted(wanted - got)
        if missing:
            skipped = "; ".join(line.get("skipped", ())) or "nothing"
            added = " ".join(line.get("added", ()))
            return Status.FLAGS_NOT_APPLIED, ("the candidate's flags did not reach the compile of "
                                              f"{name}: missing {' '.join(missing)} (the wrapper "
                                              f"added: {added}; skipped: {skipped})")
    return None, ""


def read_log(path: Path) -> list[dict]:
    """The wrapper's log of one run, a JSON value per line (a line of another shape skipped)."""
    lines: list[dict] = []
    # (a private folder: a run that compiled nothing has none)
    text = path.read_text() if path.exists() else ""
    for line in text.splitlines():
        try:
            lines.append(json.loads(line))
        except (ValueError, RecursionError):
            continue
    return lines


def copy_to_users_log(path: Path) -> None:
    """The user's own NVCC_EVO_LOG gets the run's compiles too."""
    users = os.environ.get("NVCC_EVO_LOG")
    if users and path.exists():
        append(users, path.read_text())         # never through a link
