"""`nvcc-evo-ptxas`: a drop-in ptxas, for programs that run ptxas themselves
(Triton: `TRITON_PTXAS_PATH=nvcc-evo-ptxas`).

The first code of every call (os, sys and `common` only, as the drop-in
nvcc's shim): find the real ptxas, find the ACF, and exec the real ptxas at
once with the very argv when there is no ACF, so that such a call costs
starting Python and nothing more. With an ACF whose cached index names none
of the PTX's kernels, the same after reading the two files
(nvcc_evo.driver.dropin_ptxas.untouched). Else nvcc_evo.driver.dropin_ptxas.decide
matches the PTX's `.entry` names against its kernel units and adds their
ptxas knobs.

The real ptxas: NVCC_EVO_REAL_PTXAS; else (called by Triton) the ptxas
Triton ships (`triton/backends/nvidia/bin/`, beside the libtriton its caller
has loaded); else the toolkit's
($CUDA_HOME/bin, $CUDA_PATH/bin, PATH); never nvcc-evo-ptxas itself. The
project setting `real-ptxas` names one where the environment does not.
The ACF: NVCC_EVO_ACF, else the nearest nvcc-evo.acf at or above the
working folder (a PTX lies in a temporary folder: there is no source to walk up from),
used only when trusted (decide.refused_acf: the drop-in nvcc's rule).
"""
from __future__ import annotations

import os
import sys

from nvcc_evo.driver.common import (ACF_ENV, ACF_NAME, ENVIRONMENT, REAL_PTXAS_ENV, TRITON_BIN, explicit_program,
                                    usable)

TRITON_LIBRARY = os.sep + os.path.join("triton", "_C", "libtriton")


class PtxasNotFound(Exception):
    pass


def _program_name() -> str:
    """`ptxas`, or `ptxas-blackwell` where we stand in for that one."""
    name = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else ""
    return "ptxas-blackwell" if "blackwell" in name else "ptxas"


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


def find_real_ptxas(environ, ppid: int | None = None) -> str:
    """The ptxas this call stands for (see the module's words); PtxasNotFound when none."""
    explicit = explicit_program(environ, REAL_PTXAS_ENV, "nvcc-evo-ptxas", PtxasNotFound)
    if explicit:
        return explicit
    name = _program_name()
    folders = _triton_folders(os.getppid() if ppid is None else ppid)
    folders += [os.path.join(environ[v], "bin") for v in ("CUDA_HOME", "CUDA_PATH") if environ.get(v)]
    folders += [folder or "." for folder in environ.get("PATH", "").split(os.pathsep)]
    for folder in folders:
        path = os.path.join(folder, name)
        if usable(path):
            return os.path.abspath(path)
    raise PtxasNotFound(f"no real {name} found: set {REAL_PTXAS_ENV}, CUDA_HOME or PATH")


def find_acf(environ, cwd: str) -> str | None:
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


def main() -> int:
    argv, environ = sys.argv[1:], os.environ
    try:
        real, missing = find_real_ptxas(environ), None
    except PtxasNotFound as problem:
        real, missing = None, problem      # the project settings may name one
    try:
        cwd = os.getcwd()
    except OSError:
        cwd = None
    acf = find_acf(environ, cwd) if cwd is not None else environ.get(ACF_ENV)
    if "--explain" in argv:
        from nvcc_evo.driver.dropin_ptxas.explain import explain
        return explain([a for a in argv if a != "--explain"], real, acf, environ, cwd or "/")
    if acf is None:
        if real is None:
            print(f"nvcc-evo-ptxas: error: {missing}", file=sys.stderr)
            return ENVIRONMENT
        os.execv(real, [real, *argv])
    from nvcc_evo.driver.dropin_ptxas.untouched import certain
    if real is not None and certain(argv, acf, environ, cwd or "/"):
        os.execv(real, [real, *argv])           # no kernel unit names this PTX: known from the cached index
    from nvcc_evo.driver.dropin_ptxas.decide import launch
    return launch(argv, real, acf, environ, cwd or "/")
