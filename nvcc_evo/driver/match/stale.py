"""Whether a tuned entry is out of date: the source's fingerprint (the unit,
the project headers it includes with quotes, the files its knobs name) and
`staleness` (source, toolkit, pins or search space changed since it was tuned).
"""
from __future__ import annotations

import hashlib
import re
from pathlib import Path

from nvcc_evo.driver.match.index import TargetEntry

INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"', re.M)
SPACE_CHANGED = "pins or search space changed"     # the same words in --explain and --retune --dry-run


def fingerprint(source: Path, include_dirs: list[str], files: tuple[str, ...] = (), acf_dir: Path | None = None) -> str:
    """sha256 over the unit and every project header it includes with
    quotes, found as the preprocessor would (its folder, then -I folders),
    and the `files` its knobs name in `acf_dir` (controls files: an edited
    one makes a tuned entry stale; a unit that names none keeps the digest
    it always had)."""
    digest = _sources_digest(source, include_dirs)
    for name in files:
        try:
            data = (acf_dir / name).read_bytes()
        except OSError:
            data = b"(unreadable)"
        digest.update(b"file\0" + name.encode() + b"\0" + hashlib.sha256(data).digest())
    return "sha256:" + digest.hexdigest()[:32]


def _sources_digest(source: Path, include_dirs: list[str]):
    digest, seen, todo = hashlib.sha256(), set(), [source.resolve()]
    while todo:
        path = todo.pop()
        if path in seen:
            continue
        seen.add(path)
        try:
            data = path.read_bytes()
        except OSError:
            continue
        digest.update(path.name.encode() + b"\0" + data + b"\0")
        for name in INCLUDE.findall(data.decode(errors="replace")):
            for folder in [path.parent, *map(Path, include_dirs)]:
                candidate = (folder / name)
                if candidate.is_file():
                    todo.append(candidate.resolve())
                    break
    return digest


def staleness(target: TargetEntry | None, print_: str, toolkit_version: str, space_digest: str = "") -> tuple[str, ...]:
    """Why a target's entry is out of date. A provenance without a key (an
    entry written before it existed) is not stale for that key."""
    if target is None:
        return ()
    why = []
    if target.fingerprint is not None and target.fingerprint != print_:
        why.append("source changed since it was tuned")
    if target.toolkit is not None and target.toolkit != toolkit_version:
        why.append(f"tuned with CUDA {target.toolkit}, building with {toolkit_version}")
    if target.space_digest is not None and space_digest and target.space_digest != space_digest:
        why.append(SPACE_CHANGED)
    return tuple(why)
