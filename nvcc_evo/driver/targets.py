"""Which SASS architectures this nvcc builds: `--target` and `retune.target`
(a usage error otherwise), a target block of the ACF (`--acf-check` warns at
its line; a retune skips it, said), asked of `nvcc --list-gpu-code` once a
process. nvcc lists the plain architectures only: an `a` or `f` variant
(sm_90a, sm_100f) is built where its plain one is."""
from __future__ import annotations

import functools
import subprocess
from typing import TYPE_CHECKING

from nvcc_evo.acf.resolve import ARCH_PATTERN
from nvcc_evo.errors import UsageError
from nvcc_evo.system.programs import note

if TYPE_CHECKING:
    from nvcc_evo.driver.toolkit import Toolkit


@functools.lru_cache(maxsize=8)
def toolkit_archs(nvcc: str) -> tuple[str, ...]:
    """The SASS architectures `nvcc --list-gpu-code` names (() if it cannot say)."""
    note(nvcc, "its architectures")
    try:
        listed = subprocess.run([nvcc, "--list-gpu-code"], capture_output=True, text=True,
                                timeout=60)
    except (OSError, subprocess.SubprocessError):
        return ()
    return tuple(line.strip()
                 for line in listed.stdout.splitlines() if line.strip().startswith("sm_"))


def not_built(arch: str, nvcc: str, version: str) -> str:
    """Why this nvcc does not build `arch` ("" where it does, or cannot say)."""
    built = toolkit_archs(nvcc)
    if not built or arch.rstrip("af") in built:
        return ""
    return f"CUDA {version}'s nvcc does not build it (it builds {', '.join(built)})"


def check_target(arch: str | None, toolkit: Toolkit, source: str = "--target") -> None:
    """`--target` (or the setting `source` names) is a SASS architecture this nvcc builds."""
    if arch is None:
        return
    named = f"--target {arch}" if source.startswith("--") else f"{source}: target = '{arch}'"
    if not ARCH_PATTERN.fullmatch(arch):
        raise UsageError(f"{named}: expected a SASS architecture such as sm_90 or sm_90a")
    why = not_built(arch, toolkit.nvcc, toolkit.version)
    if why:
        raise UsageError(f"{named}: {why}")
