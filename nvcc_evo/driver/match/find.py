"""Finding the ACF a compile or a verb uses: `$NVCC_EVO_ACF` if set, else the
nearest `nvcc-evo.acf` walking up from each input's folder, else from the
working directory; whether it is trusted and can be read.
"""
from __future__ import annotations

import os
from pathlib import Path

from nvcc_evo.driver.common import ACF_ENV, ACF_NAME

TYPE_CHECKING = False
if TYPE_CHECKING:          # (on the compile path: no typing at run time)
    from collections.abc import Mapping


def find_acf(start_dirs: list[Path], environ: Mapping[str, str]) -> Path | None:
    """NVCC_EVO_ACF's file, else the nearest nvcc-evo.acf at or above one of `start_dirs`."""
    explicit = environ.get(ACF_ENV)
    if explicit:
        return Path(explicit).resolve()
    for start in start_dirs:
        for folder in [start, *start.parents]:
            candidate = folder / ACF_NAME
            if os.path.lexists(candidate):      # a folder, FIFO or link loop of that name too: it
                                                # is the
                return candidate                # project's ACF, and acf_problem says why it cannot
                                                # be read
    return None


def untrusted_acf(acf_path: Path, environ: Mapping[str, str]) -> str:
    """Why the ACF found by walking up is not used (nvcc_evo.system.trust:
    another user's file, a folder others may write); "" when it is trusted or
    NVCC_EVO_ACF names it (trusted as given)."""
    if environ.get(ACF_ENV):
        return ""
    from nvcc_evo.system.trust import untrusted
    return untrusted(acf_path, environ)


def unreadable(path: str | os.PathLike[str]) -> str:
    """Why the ACF at `path` cannot be read ("" when it can)."""
    from nvcc_evo.system.files import require_regular_file
    try:
        require_regular_file(path)
        with open(path, "rb"):
            return ""
    except OSError as error:
        return error.strerror or str(error)


def acf_problem(acf_path: Path, environ: Mapping[str, str]) -> str:
    """Why the ACF found cannot be read, naming NVCC_EVO_ACF when it named
    the file ("" when it can be read)."""
    why = unreadable(acf_path)
    if not why:
        return ""
    named = f" ({ACF_ENV}={environ[ACF_ENV]})" if environ.get(ACF_ENV) else ""
    return f"cannot read the ACF {acf_path}{named}: {why}"


def named_acf_problem(environ: Mapping[str, str]) -> str:
    """Why the ACF that NVCC_EVO_ACF names cannot be read ("" when it can, or
    when it names none): an error for the verbs, a warning in builds."""
    named = environ.get(ACF_ENV)
    return acf_problem(Path(named).resolve(), environ) if named else ""
