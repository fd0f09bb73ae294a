"""Which kernels a kernel unit's globs name: `unit kernel "NAME_GLOB[@HEX]"`.

The name part matches a PTX `.entry` name as fnmatch does (`*`, `?`,
`[...]`, case counts); `@HEX` narrows the unit to a PTX whose sha256 starts
with those hex digits (one kernel name compiled with other constexprs is
other code). The one matcher of kernel globs: the check, nvcc-evo-ptxas
(nvcc_evo.driver.dropin_ptxas.decide) and --retune. Only re and fnmatch: the compile path uses it.
"""
from __future__ import annotations

import fnmatch
import re

TYPE_CHECKING = False
if TYPE_CHECKING:          # (the compile path imports neither typing nor collections.abc)
    from collections.abc import Iterable

NAME_GLOB = re.compile(r"[A-Za-z0-9_$*?\[\]!-]+")
DIGEST = re.compile(r"[0-9a-f]{8,64}")
MIN_DIGEST = 8


def split(glob: str) -> tuple[str, str]:
    """(the name glob, the PTX digest prefix or "")."""
    name, _, digest = glob.partition("@")
    return name, digest


def glob_problem(glob: str) -> str | None:
    """Why a kernel unit may not have this glob (None when it may)."""
    name, digest = split(glob)
    if not name or not NAME_GLOB.fullmatch(name):
        return (f"kernel name '{name}' is not a PTX entry name or a glob of one (letters, digits, "
                f"'_', '$' and '*', '?', '[...]')")
    if "@" in glob and not DIGEST.fullmatch(digest):
        return (f"'@{digest}' is no PTX digest: {MIN_DIGEST} to 64 lowercase hex digits of the "
                f"PTX's sha256 (nvcc-evo-ptxas --explain shows it)")
    return None


def matches(glob: str, entries: Iterable[str], digest: str) -> bool:
    """Does the glob name one of a PTX's `.entry` names (and its sha256 hex `digest`)?"""
    name, prefix = split(glob)
    if prefix and not digest.startswith(prefix):
        return False
    return any(fnmatch.fnmatchcase(entry, name) for entry in entries)
