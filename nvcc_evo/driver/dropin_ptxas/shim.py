"""`nvcc-evo-ptxas` and `nvcc-evo-ptxas-blackwell`: a drop-in ptxas, for
programs that run ptxas themselves (Triton: `TRITON_PTXAS_PATH=nvcc-evo-ptxas`
and, from sm_100 on, `TRITON_PTXAS_BLACKWELL_PATH=nvcc-evo-ptxas-blackwell`).

The first code of every call (os, sys and `common` only, as the drop-in
nvcc's shim): know which of Triton's two programs this call stands in for
(`stands_for`), find the real one, find the ACF, and exec the real program at
once with the very argv when there is no ACF, so that such a call costs
starting Python and nothing more. With an ACF whose cached index names none
of the PTX's kernels, the same after reading the two files
(nvcc_evo.driver.dropin_ptxas.untouched). Else nvcc_evo.driver.dropin_ptxas.decide
matches the PTX's `.entry` names against its kernel units and adds their
ptxas knobs.

Triton 3.6 runs `ptxas` below sm_100 and `ptxas-blackwell` (another
release) from sm_100 on, and derives the PTX's `.version` from each one's
`--version` answer: each stand-in runs the program it replaces, never the
other. The real `ptxas`: NVCC_EVO_REAL_PTXAS; else (called by Triton) the
ptxas Triton ships (`triton/backends/nvidia/bin/`, beside the libtriton its
caller has loaded); else the toolkit's ($CUDA_HOME/bin, $CUDA_PATH/bin,
PATH). The real `ptxas-blackwell`: NVCC_EVO_REAL_PTXAS_BLACKWELL; else
Triton's, beside its caller's libtriton or in the Triton this Python
imports; else a `ptxas-blackwell` in those folders; never a plain ptxas.
Never nvcc-evo-ptxas itself. The project settings `real-ptxas` and
`real-ptxas-blackwell` name one where the environment does not.
The ACF: NVCC_EVO_ACF, else the nearest nvcc-evo.acf at or above the
working folder (a PTX lies in a temporary folder: there is no source to walk up from),
used only when trusted (decide.refused_acf: the drop-in nvcc's rule).
"""
from __future__ import annotations

import os
import sys

from nvcc_evo.driver.common import (ACF_ENV, ACF_NAME, BLACKWELL_PTXAS as BLACKWELL, ENVIRONMENT,
                                    PLAIN_PTXAS as PLAIN, REAL_PTXAS_OF as REAL_ENV, TRITON_BIN,
                                    TRITON_PTXAS_BLACKWELL_ENV, TRITON_PTXAS_ENV, explicit_program,
                                    usable)

TYPE_CHECKING = False
if TYPE_CHECKING:          # (every Triton ptxas call starts here: no typing at run time)
    from collections.abc import Mapping

TRITON_LIBRARY = os.sep + os.path.join("triton", "_C", "libtriton")
EITHER = "ptxas or ptxas-blackwell"     # a `--version` asked of both at once
FIRST_BLACKWELL = 100  # Triton's get_ptxas(arch): ptxas-blackwell from compute capability 10.0 on


class PtxasNotFound(Exception):
    pass


def stands_for(argv0: str, argv: list[str], environ: Mapping[str, str]) -> str:
    """PLAIN, BLACKWELL or EITHER: the program this call stands in for. Called as
    `nvcc-evo-ptxas-blackwell` (or any name holding `ptxas-blackwell`):
    BLACKWELL. Plain `nvcc-evo-ptxas` named in TRITON_PTXAS_BLACKWELL_PATH
    (a likely slip) is BLACKWELL for a compile from sm_100 on, and for
    `--version` unless TRITON_PTXAS_PATH names it too: then Triton asks one
    `--version` for both (its answer is cached by path), EITHER."""
    if BLACKWELL in os.path.basename(argv0):
        return BLACKWELL
    named = environ.get(TRITON_PTXAS_BLACKWELL_ENV)
    if not named or not _same_file(named, argv0, environ):
        return PLAIN
    if "--version" in argv:
        plain_too = _same_file(environ.get(TRITON_PTXAS_ENV, ""), argv0, environ)
        return EITHER if plain_too else BLACKWELL
    arch = _gpu_name(argv)
    digits = arch[3:].rstrip("af") if arch.startswith("sm_") else ""
    return BLACKWELL if digits.isdigit() and int(digits) >= FIRST_BLACKWELL else PLAIN


def _same_file(path: str, other: str, environ: Mapping[str, str]) -> bool:
    """Whether `path` (a bare name: looked up on PATH, as Triton's run of it is) is the file
    `other`."""
    if not path:
        return False
    folders = environ.get("PATH", "").split(os.pathsep) if os.sep not in path else [""]
    for folder in folders:
        try:
            if os.path.samefile(os.path.join(folder, path), other):
                return True
        except OSError:
            continue
    return False


def older(environ: Mapping[str, str]) -> str:
    """EITHER's answer: the role whose real program is the older release.
    Triton writes the PTX `.version` of the release it is told, and the
    newer program takes an older PTX, never the reverse."""
    import re
    import subprocess
    releases = []
    for role in (PLAIN, BLACKWELL):
        try:
            said = subprocess.run([find_real_ptxas(environ, role=role), "--version"],
                                  capture_output=True,
                                  text=True).stdout
        except (PtxasNotFound, OSError):
            continue
        found = re.search(r"release (\d+)\.(\d+)", said)
        releases.append(((int(found[1]), int(found[2])) if found else (999, 0), role))
    return min(releases)[1] if releases else PLAIN


def _gpu_name(argv: list[str]) -> str:
    """The `--gpu-name` (`-arch`) of a ptxas command line, "" when none."""
    for index, word in enumerate(argv):
        name, eq, value = word.partition("=")
        if name in ("--gpu-name", "-arch") and eq:
            return value
        if name in ("--gpu-name", "-arch"):
            return argv[index + 1] if index + 1 < len(argv) else ""
    return ""


def _triton_folders(ppid: int) -> list[str]:
    """Triton's bin folder when Triton calls: beside the libtriton the
    calling process has loaded (its /proc maps)."""
    folders = []
    try:
        with open(f"/proc/{ppid}/maps") as maps:
            for line in maps:
                at = line.find(TRITON_LIBRARY)
                if at >= 0:
                    root = line[line.index("/"):at]
                    folders.append(os.path.join(root, TRITON_BIN))
                    break
    except (OSError, ValueError):
        pass
    return folders


def _beside_us() -> list[str]:
    """Triton's bin folder in the Triton this Python imports (sys.path; nothing imported)."""
    return [os.path.join(entry, TRITON_BIN) for entry in sys.path if entry]


def find_real_ptxas(environ: Mapping[str, str], ppid: int | None = None,
                    role: str = PLAIN) -> str:
    """The program this call stands for (see the module's words); PtxasNotFound when none."""
    variable = REAL_ENV[role]
    explicit = explicit_program(environ, variable, "nvcc-evo-ptxas", PtxasNotFound)
    if explicit:
        return explicit
    folders = _triton_folders(os.getppid() if ppid is None else ppid)
    folders += _beside_us() if role == BLACKWELL else []      # (the toolkit has no ptxas-blackwell)
    folders += [os.path.join(environ[v], "bin")
                for v in ("CUDA_HOME", "CUDA_PATH") if environ.get(v)]
    folders += [folder or "." for folder in environ.get("PATH", "").split(os.pathsep)]
    for folder in folders:
        path = os.path.join(folder, role)
        if usable(path):
            return os.path.abspath(path)
    ships = f" (Triton ships one in {TRITON_BIN})" if role == BLACKWELL else ""
    raise PtxasNotFound(f"no real {role} found{ships}: set {variable}, CUDA_HOME or PATH")


def find_acf(environ: Mapping[str, str], cwd: str) -> str | None:
    """NVCC_EVO_ACF, else the nearest nvcc-evo.acf at or above `cwd`."""
    if environ.get(ACF_ENV):
        return os.path.abspath(environ[ACF_ENV])
    folder = cwd
    while True:
        candidate = os.path.join(folder, ACF_NAME)
        if os.path.lexists(candidate):
            return candidate
        parent = os.path.dirname(folder)
        if parent == folder:
            return None
        folder = parent


def main(role: str | None = None) -> int:
    argv, environ = sys.argv[1:], os.environ
    role = role or stands_for(sys.argv[0] if sys.argv else "", argv, environ)
    role = older(environ) if role == EITHER else role
    try:
        real, missing = find_real_ptxas(environ, role=role), None
    except PtxasNotFound as problem:
        real, missing = None, problem      # the project settings may name one
    try:
        cwd = os.getcwd()
    except OSError:
        cwd = None
    acf = find_acf(environ, cwd) if cwd is not None else environ.get(ACF_ENV)
    if "--explain" in argv:
        from nvcc_evo.driver.dropin_ptxas.explain import explain
        return explain([a for a in argv if a != "--explain"], real, acf, environ, cwd or "/", role)
    if acf is None:
        if real is None:
            print(f"nvcc-evo-{role}: error: {missing}", file=sys.stderr)
            return ENVIRONMENT
        os.execv(real, [real, *argv])
    from nvcc_evo.driver.dropin_ptxas.untouched import certain
    if real is not None and certain(argv, acf, environ, cwd or "/"):
        os.execv(real, [real, *argv])           # no kernel unit names this PTX: known from the
                                                # cached index
    from nvcc_evo.driver.dropin_ptxas.decide import launch
    return launch(argv, real, acf, environ, cwd or "/", role)


def main_blackwell() -> int:
    """`nvcc-evo-ptxas-blackwell`: stands in for Triton's ptxas-blackwell
    (TRITON_PTXAS_BLACKWELL_PATH)."""
    return main(BLACKWELL)
