"""Whether a tuned entry is out of date: the source's fingerprint (the unit,
the project headers it includes with quotes, the files its knobs name) and
`staleness` (source, toolkit, pins or search space changed since it was tuned),
each reason a `Reason`: what changed and the files it names, words for people.
"""
from __future__ import annotations

import hashlib
import os
import re
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from nvcc_evo.driver.match.index import TargetEntry

if TYPE_CHECKING:
    from collections.abc import Iterator

    from nvcc_evo.driver.cmdline.nvcc_options import NvccCall

INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"', re.M)
SPACE_CHANGED = "pins or search space changed"  # the same words in --explain and --retune --dry-run
TUNE_CHANGED = "tune block changed (objectives, require, select)"
MOST_FILES_NAMED = 4


class ReasonKind(Enum):
    """Why an entry is (re)tuned: what changed since it was tuned, or what it lacks."""

    SOURCE = "source"          # the unit's sources: its fingerprint
    TOOLKIT = "toolkit"        # the toolkit (or the ptxas a kernel unit's program runs)
    SPACE = "space"            # the unit's pins or search block
    TUNE = "tune"              # the unit's tune block
    BUILD = "build"            # the build it was tuned for
    GPU = "gpu"                # the GPU model it was measured on
    NO_ENTRY = "no entry"      # no target block for the architecture
    UNTUNED = "untuned"        # a block without provenance: never tuned
    STATIC_ONLY = "static"     # static objectives only: never measured
    ASKED = "asked"            # named on the command line (or --all): retuned regardless


class Reason(NamedTuple):
    """One reason an entry is stale: its kind, the words a person reads, and the files it names
    (a changed source's, where they are known)."""

    kind: ReasonKind
    words: str
    files: tuple[str, ...] = ()

    def __str__(self) -> str:
        if not self.files:
            return self.words
        more = " ..." if len(self.files) > MOST_FILES_NAMED else ""
        return f"{self.words} ({', '.join(self.files[:MOST_FILES_NAMED])}{more})"


def fingerprint(source: Path, call: NvccCall | None = None, cwd: str | os.PathLike = "",
                files: tuple[str, ...] = (), acf_dir: Path | None = None) -> str:
    """sha256 over the unit and every project header it includes with
    quotes, found as the preprocessor would (its folder, then the -I folders
    of `call`, the compile that builds it, relative to `cwd`, the folder it
    runs in; None: a PTX, which includes nothing), and the `files` its knobs
    name in `acf_dir` (controls files: an edited one makes a tuned entry
    stale; a unit that names none keeps the digest it always had). The one
    digest of a unit's sources: the build, --retune and --report all make it
    here, from the compile they know (the call, its compile-database record)."""
    digest = _sources_digest(source, _include_dirs(call, cwd))
    for name in files:
        assert acf_dir is not None  # (the files a unit's knobs name are in its ACF's folder)
        try:
            data = (acf_dir / name).read_bytes()
        except OSError:
            data = b"(unreadable)"
        digest.update(b"file\0" + name.encode() + b"\0" + hashlib.sha256(data).digest())
    return "sha256:" + digest.hexdigest()[:32]


def _sources_digest(source: Path, include_dirs: list[str]) -> hashlib._Hash:
    digest = hashlib.sha256()
    for path, data in _sources(source, include_dirs):
        digest.update(path.name.encode() + b"\0" + data + b"\0")
    return digest


def source_digests(source: Path, call: NvccCall | None = None,
                   cwd: str | os.PathLike = "") -> dict[str, str]:
    """{path: sha256} of each file `fingerprint` reads of the unit's sources (the unit, its quoted
    includes as `call` finds them): what tells two builds' sources apart, file by file."""
    return {str(path): hashlib.sha256(data).hexdigest()
            for path, data in _sources(source, _include_dirs(call, cwd))}


def _include_dirs(call: NvccCall | None, cwd: str | os.PathLike) -> list[str]:
    """The -I folders of a compile, relative to the folder it runs in (a PTX's call: None, no
    folders)."""
    return [os.path.join(cwd, d) for d in call.values("--include-path")] if call is not None else []


def _sources(source: Path, include_dirs: list[str]) -> Iterator[tuple[Path, bytes]]:
    """(path, bytes) of the unit and each header it includes with quotes, found as the preprocessor
    would."""
    seen, todo = set(), [source.resolve()]
    while todo:
        path = todo.pop()
        if path in seen:
            continue
        seen.add(path)
        try:
            data = path.read_bytes()
        except OSError:
            continue
        yield path, data
        for name in INCLUDE.findall(data.decode(errors="replace")):
            for folder in [path.parent, *map(Path, include_dirs)]:
                candidate = (folder / name)
                if candidate.is_file():
                    todo.append(candidate.resolve())
                    break


def staleness(target: TargetEntry | None, unit_fingerprint: str, toolkit_version: str,
              space_digest: str = "",
              tune_digest: str = "") -> tuple[Reason, ...]:
    """Why a target's entry is out of date. A provenance without a key (an
    entry written before it existed) is not stale for that key. A changed
    source names no file here (a build does not look for them: --explain does)."""
    if target is None:
        return ()
    why = []
    if target.fingerprint is not None and target.fingerprint != unit_fingerprint:
        why.append(Reason(ReasonKind.SOURCE, "source changed since it was tuned"))
    if target.toolkit is not None and target.toolkit != toolkit_version:
        why.append(Reason(ReasonKind.TOOLKIT,
                          f"tuned with CUDA {target.toolkit}, building with {toolkit_version}"))
    if target.space_digest is not None and space_digest and target.space_digest != space_digest:
        why.append(Reason(ReasonKind.SPACE, SPACE_CHANGED))
    if target.tune_digest is not None and tune_digest and target.tune_digest != tune_digest:
        why.append(Reason(ReasonKind.TUNE, TUNE_CHANGED))
    return tuple(why)
