"""What a retune covers, as the command line says it: the units named by
their globs or by a file they cover (`--retune 'sgemm*'`, `--retune
kernels/a.cu`), and the `--target` architecture. A name that matches no
unit, or an architecture the toolkit does not build, is a usage error
before anything is compiled."""
from __future__ import annotations

import difflib
import fnmatch
import subprocess
from pathlib import Path

from nvcc_evo import acf
from nvcc_evo.errors import UsageError
from nvcc_evo.plan import index_units, match_unit
from nvcc_evo.resolve import ARCH_PATTERN


def _covers(unit: acf.Unit, entry, pattern: str, acf_path: Path, cwd: Path) -> bool:
    """A selection names a unit by its globs (`sgemm*`, `./a.cu`), or names a
    file (relative to the working folder) that the unit covers."""
    wanted = pattern[2:] if pattern.startswith("./") else pattern
    if any(fnmatch.fnmatchcase(g, wanted) or g == wanted for g in unit.globs):
        return True
    named = cwd / pattern
    return named.is_file() and match_unit((entry,), acf_path.parent, named) is not None


def select_units(file: acf.AcfFile, acf_path: Path, patterns: tuple[str, ...], cwd: Path) -> list[int]:
    """The indices of the units the command line names (all without
    patterns); a pattern that names no unit is a usage error."""
    if not patterns:
        return list(range(len(file.units)))
    entries = index_units(file)
    chosen = set()
    for pattern in patterns:
        hits = {i for i, unit in enumerate(file.units) if _covers(unit, entries[i], pattern, acf_path, cwd)}
        if not hits:
            known = ", ".join(str(u) for u in file.units) or "none"
            close = difflib.get_close_matches(pattern, [g for u in file.units for g in u.globs], n=1)
            hint = f"; did you mean {close[0]}?" if close else ""
            raise UsageError(f"--retune {pattern}: no unit of {acf_path} matches it{hint} (units: {known})")
        chosen |= hits
    return sorted(chosen)


def check_target(arch: str | None, toolkit) -> None:
    """`--target` names a SASS architecture this nvcc builds."""
    if arch is None:
        return
    if not ARCH_PATTERN.fullmatch(arch):
        raise UsageError(f"--target takes a SASS architecture such as sm_90 or sm_90a, got '{arch}'")
    built = toolkit_archs(toolkit.nvcc)
    if built and arch not in built:
        raise UsageError(f"--target {arch}: CUDA {toolkit.version}'s nvcc does not build it "
                         f"(it builds {', '.join(built)})")


def toolkit_archs(nvcc: str) -> list[str]:
    """The SASS architectures `nvcc --list-gpu-code` names ([] if it cannot say)."""
    try:
        listed = subprocess.run([nvcc, "--list-gpu-code"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return []
    return [line.strip() for line in listed.stdout.splitlines() if line.strip().startswith("sm_")]
