"""The ACF index's cache file: what nvcc_evo.driver.match.index keeps of a
checked ACF (its units, or its errors), for the ACF's bytes and path, and
read back only while the files the check looked at (those its knobs and
references name) are as the check saw them. A broken ACF is kept as its
diagnostics, so that a Triton run's hundreds of ptxas calls do not parse it
each. os, json and zlib only: the drop-in ptxas reads it before anything
else is imported (nvcc_evo.driver.dropin_ptxas.untouched). The file is
named by a CRC of the bytes and path, and holds both, compared exactly on
reading: a name two texts share is a miss, never the other's index (and no
OpenSSL to load for a digest: hashlib is 2 ms of a ptxas call).
"""
from __future__ import annotations

import json
import os
import zlib

from nvcc_evo.driver.cache import prune
from nvcc_evo.driver.common import BROKEN_FILE, replace_file

TYPE_CHECKING = False
if TYPE_CHECKING:          # (the drop-in ptxas reads the index first: no typing at run time)
    from collections.abc import Iterable

# Part of the cache's key: an index written before the check refused
# something (a define's shell characters, a path out of the ACF's folder) is
# not trusted. Change it whenever the check or the index changes.
# index-6: the ACF's bytes, not its text; errors kept; the files the check looked at.
# index-7: each unit's tune_digest, and each target's recorded one.
INDEX_FORMAT = "index-7"


def _key(data: bytes, acf_path: str) -> list[str]:
    return [INDEX_FORMAT, acf_path, data.decode("latin-1")]       # (latin-1: any bytes, exactly)


def cache_path(cache_dir: str, data: bytes, acf_path: str) -> str:
    """The cache file of the ACF at `acf_path` whose bytes are `data`."""
    key = json.dumps(_key(data, acf_path)).encode()
    return os.path.join(cache_dir, f"acf-{zlib.crc32(key):08x}-{len(key):x}.json")


def facts(names: Iterable[str]) -> list[list[object]]:
    """What a check sees of each path: whether it is a file, and its real path."""
    return [[name, os.path.isfile(name), os.path.realpath(name)] for name in names]


def looked_at(files: Iterable[str], acf_path: str) -> list[list[object]]:
    """The facts of the files a check looked at, and of the ACF's folder
    (whether each stays inside it is asked by real paths)."""
    return facts([*files, os.path.dirname(os.path.abspath(acf_path))]) if files else []


def read(cache_dir: str, data: bytes, acf_path: str) -> dict | None:
    """The entry cached for this ACF ({"units", "kernel_globs", "files"} or
    {"errors", "files"}); None when there is none or a file the check looked
    at has changed since."""
    try:
        with open(cache_path(cache_dir, data, acf_path), "rb") as handle:
            entry = json.loads(handle.read())
        seen = entry["files"]
        if entry["key"] != _key(data,
                                acf_path) or seen and facts([name for name, _, _ in seen]) != seen:
            return None
        return entry if "units" in entry or "errors" in entry else None
    except BROKEN_FILE:
        return None


def write(cache_dir: str, data: bytes, acf_path: str, entry: dict) -> None:
    """Keep `entry` for this ACF (a new one: those of older texts go in time)."""
    try:
        replace_file(cache_path(cache_dir, data, acf_path),
                     json.dumps({**entry, "key": _key(data, acf_path)}))
        prune(cache_dir)
    except OSError:
        pass
