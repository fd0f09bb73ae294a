"""The drop-in nvcc wrapper: find the real nvcc and exec it.

Nothing of ours goes to stdout; the real nvcc gets its absolute path as
argv[0] (it finds its toolkit from there) and replaces this process, so exit
codes, signals and make's jobserver descriptors pass through untouched.
"""
from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

from nvcc_evo.errors import EnvironmentProblem, ExitCode

REAL_NVCC_ENV = "NVCC_EVO_REAL_NVCC"
GUARD_ENV = "NVCC_EVO_ACTIVE"


def _is_self(candidate: Path) -> bool:
    me = Path(sys.argv[0]).resolve() if sys.argv and sys.argv[0] else None
    try:
        resolved = candidate.resolve()
    except OSError:
        return False
    if me is not None and resolved == me:
        return True
    try:
        with open(resolved, "rb") as handle:
            head = handle.read(512)
    except OSError:
        return False
    return b"nvcc_evo" in head   # a console-script shim of ours


def find_real_nvcc() -> Path:
    """Explicit setting, else CUDA_HOME/CUDA_PATH, else PATH; never ourselves."""
    explicit = os.environ.get(REAL_NVCC_ENV)
    if explicit:
        path = Path(explicit)
        if not (path.is_file() and os.access(path, os.X_OK)):
            raise EnvironmentProblem(f"{REAL_NVCC_ENV}={explicit} is not an executable file")
        if _is_self(path):
            raise EnvironmentProblem(f"{REAL_NVCC_ENV}={explicit} points at nvcc-evo itself")
        return path.absolute()
    for variable in ("CUDA_HOME", "CUDA_PATH"):
        root = os.environ.get(variable)
        if root:
            path = Path(root) / "bin" / "nvcc"
            if path.is_file() and os.access(path, os.X_OK) and not _is_self(path):
                return path.absolute()
    for folder in os.environ.get("PATH", "").split(os.pathsep):
        path = Path(folder or ".") / "nvcc"
        if path.is_file() and os.access(path, os.X_OK) and not _is_self(path):
            return path.absolute()
    raise EnvironmentProblem(f"no real nvcc found: set {REAL_NVCC_ENV}, CUDA_HOME or PATH")


def run_wrapper(argv: list[str]) -> int:
    if os.environ.get(GUARD_ENV):
        print("nvcc-evo: error: nvcc-evo called itself as nvcc; set "
              f"{REAL_NVCC_ENV} to the real nvcc", file=sys.stderr)
        return ExitCode.ENVIRONMENT
    try:
        nvcc = find_real_nvcc()
    except EnvironmentProblem as problem:
        print(f"nvcc-evo: error: {problem}", file=sys.stderr)
        return ExitCode.ENVIRONMENT
    os.environ[GUARD_ENV] = "1"
    os.execv(nvcc, [str(nvcc), *argv])
