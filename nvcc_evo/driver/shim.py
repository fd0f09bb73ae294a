"""The first code every compile runs: find the real nvcc, and exec it at
once when no ACF can apply. Only `os`, `sys` and nvcc_evo.driver.common
here: a build that has no ACF pays for starting Python and nothing more. When an ACF may apply, the
wrapper (nvcc_evo.driver.wrapper) decides what to add.
"""
from __future__ import annotations

import os
import sys

from nvcc_evo.driver.common import (ACF_ENV, ACF_NAME, ENVIRONMENT, GUARD_ENV, LOG_ENV, NO_ACF,
                                    REAL_NVCC_ENV,
                                     NvccNotFound, append_log, called_by_a_wrapper_of_ours,
                                    find_real_nvcc,
                                     note_wrapper)

TYPE_CHECKING = False
if TYPE_CHECKING:          # (the first code of every compile: no typing at run time)
    from collections.abc import Mapping

GONE = "the working folder was removed"


def acf_may_apply(argv: list[str], environ: Mapping[str, str], cwd: str) -> bool:
    """Cheap and on the safe side: is there an ACF above the working folder
    or above any argument that could be a file? (The wrapper then decides
    properly; a False here means nvcc runs exactly as asked.)"""
    if environ.get(ACF_ENV):
        return True
    folders = {cwd} | {os.path.dirname(os.path.join(cwd, a))
                       for a in argv if a and not a.startswith("-")}
    seen = set()
    for folder in folders:
        while folder not in seen:
            seen.add(folder)
            if os.path.lexists(os.path.join(folder, ACF_NAME)):   # unreadable too: the wrapper says
                                                                  # why
                return True
            folder = os.path.dirname(folder)
    return False


def working_folder() -> str | None:
    """The working folder; None when it was removed (nvcc still compiles
    absolute paths there: the call then runs exactly as asked)."""
    try:
        return os.getcwd()
    except FileNotFoundError:
        return None


def run(argv: list[str]) -> int:
    environ = os.environ
    if environ.get(GUARD_ENV) or called_by_a_wrapper_of_ours():     # (the second survives `env -i`
                                                                    # and sudo)
        print("nvcc-evo: error: nvcc-evo called itself as nvcc (the nvcc it runs leads back to "
              f"nvcc-evo); set {REAL_NVCC_ENV} to the real nvcc", file=sys.stderr)
        return ENVIRONMENT
    nvcc: str | None
    try:
        nvcc, missing = find_real_nvcc(environ), None
    except NvccNotFound as problem:
        if environ.get(REAL_NVCC_ENV):         # it wins over any settings file: say what is wrong
                                               # with it
            print(f"nvcc-evo: error: {problem}", file=sys.stderr)
            return ENVIRONMENT
        nvcc, missing = None, problem          # the project settings beside an ACF may name one
    found = nvcc
    if nvcc is not None:
        note_wrapper(nvcc)                    # (before the wrapper's probes run it too)
    cwd = working_folder()
    if cwd is not None and acf_may_apply(argv, environ, cwd):
        from nvcc_evo.driver.wrapper import launch
        chosen = launch(argv, nvcc)
        if chosen is None:
            return ENVIRONMENT
        path, args, env, nvcc = chosen        # (nvcc: the settings' own, where they name one)
    elif nvcc is None:                        # (missing says why)
        print(f"nvcc-evo: error: {missing}", file=sys.stderr)
        return ENVIRONMENT
    else:
        if environ.get(LOG_ENV):
            append_log(environ[LOG_ENV], cwd or "", argv, passthrough=NO_ACF if cwd else GONE)
        path, args, env = nvcc, [nvcc, *argv], dict(environ)
    env[GUARD_ENV] = "1"
    if nvcc is not None and nvcc != found:
        note_wrapper(nvcc)                    # (the settings' own nvcc, where they name one)
    try:
        os.execve(path, args, env)
    except OSError as problem:
        if path == nvcc:
            raise
        # The split run could not start: never fail where nvcc would not.
        print(f"nvcc-evo: warning: nvcc's steps could not run ({problem}); building without "
              "tuned flags",
              file=sys.stderr)
        os.execve(nvcc, [nvcc, *argv], env)
