"""How every verb opens the project (`--retune`, `--report`, `--sass`): the
ACF found as a build finds it (`--acf`, else NVCC_EVO_ACF, else the nearest
`nvcc-evo.acf` above a named file or the working folder), trusted (another
user's ACF found by walking up is refused, nvcc_evo.system.trust), readable
(a regular file), then its project settings (another user's ignored, said)
and the real nvcc they choose. One front door, so that a rule added here
holds for every verb.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from nvcc_evo.driver import settings
from nvcc_evo.driver.common import (ACF_NAME, REAL_NVCC_ENV, NvccNotFound, find_real_nvcc,
                                    stale_problem)
from nvcc_evo.driver.match.find import acf_problem, find_acf, untrusted_acf
from nvcc_evo.errors import EnvironmentProblem, UsageError
from nvcc_evo.system.say import log

if TYPE_CHECKING:
    from collections.abc import Mapping


class Project(NamedTuple):
    """An ACF a verb may use, and the settings beside it."""

    acf_path: Path
    settings: settings.Settings

    def real_nvcc(self) -> Path:
        """NVCC_EVO_REAL_NVCC, else the settings' `nvcc`, else CUDA_HOME, CUDA_PATH, PATH."""
        return real_nvcc(self.settings)


def open_project(verb: str, named: str | None, globs: tuple[str, ...] = (),
                 environ: Mapping[str, str] = os.environ) -> Project:
    """The project `verb` works on: its ACF (`named` by --acf, else found from
    the files `globs` name and the working folder, and up), refused when
    another user's or no regular file; its settings (SettingsError when they
    have errors); a bad NVCC_EVO_STALE is a usage error."""
    wrong = stale_problem(environ)           # (a build says it and compiles untuned)
    if wrong:
        raise UsageError(wrong)
    here = Path.cwd()
    files = [here / g for g in globs if (here / g).is_file()]  # as a build finds it: from the file
    acf_path = Path(named).resolve() if named else find_acf([p.parent for p in files] + [here],
                                                            environ)
    if acf_path is None:
        raise UsageError(f"no {ACF_NAME} here or above; name one with --acf")
    problem = (not named and untrusted_acf(acf_path, environ)) or acf_problem(acf_path, environ)
    if problem:           # another user's ACF; a folder, a FIFO, a link loop of that name
        raise EnvironmentProblem(problem)
    found = settings.load(acf_path, environ)
    if found.ignored:
        log(f"warning: {found.ignored}; {verb} goes on without them")
    return Project(acf_path, found)


def real_nvcc(project: settings.Settings) -> Path:
    """NVCC_EVO_REAL_NVCC, else the project settings' `nvcc`, else CUDA_HOME, CUDA_PATH, PATH."""
    chosen = project.value("nvcc")
    try:
        if chosen.source in (settings.DEFAULT, REAL_NVCC_ENV):
            return Path(find_real_nvcc())
        return Path(find_real_nvcc({REAL_NVCC_ENV: str(chosen.value)}))
    except NvccNotFound as missing:
        if chosen.source in (settings.DEFAULT, REAL_NVCC_ENV):
            raise EnvironmentProblem(str(missing)) from None
        raise EnvironmentProblem(f"{chosen.source}: nvcc = {chosen.value} is not an executable "
                                 "nvcc") from None
