"""The compile database: how the build compiles each covered unit.

One JSON file per (working directory, input, output, arch) under
`<ACF folder>/.nvcc-evo/compile-db/`, replaced atomically, so that `make -j`
never interleaves two writers. `--retune` rebuilds a unit exactly as recorded.

A record survives a move or a copy of the project: its working folder and
input are kept relative to the ACF's folder where they lie under it, with
that folder (`root`) noted, so a record read under another folder has every
path of the old one (in argv and in the environment) mapped to the new one.
A record whose files are gone, or that names a file of another tree, is not
used; a file that cannot be read is reported. Both come back as Unusable,
for --retune to say.
"""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from nvcc_evo.driver.common import BROKEN_FILE, replace_file
from nvcc_evo.system.files import folders

if TYPE_CHECKING:
    from collections.abc import Mapping

# The environment that changes what a compile does (include and library
# search paths, nvcc's own flag variables, the host compiler): recorded with
# each compile and set again when --retune rebuilds it. (PATH is recorded but
# not set again: it changes with every activated venv, and as part of the
# build's identity it would set every stored result aside.)
COMPILE_ENV = ("CPATH", "C_INCLUDE_PATH", "CPLUS_INCLUDE_PATH", "LIBRARY_PATH", "LD_LIBRARY_PATH",
               "NVCC_PREPEND_FLAGS", "NVCC_APPEND_FLAGS", "NVCC_CCBIN", "CUDAHOSTCXX")
RELEVANT_ENV = COMPILE_ENV + ("PATH", "CUDA_HOME", "CUDA_PATH", "NVCC_EVO_GPU", "NVCC_EVO_STALE")


class CompileRecord(NamedTuple):
    argv: tuple[str, ...]
    cwd: str                  # absolute, for the ACF's folder as it is now
    env: dict
    nvcc: str
    toolkit: str
    input: str                # absolute, like cwd
    output: str
    unit_index: int
    unit_globs: tuple[str, ...]
    arch: str
    target: str | None
    fingerprint: str
    stale: tuple[str, ...]
    flags: tuple[str, ...]
    time: float

    def key(self, root: Path) -> str:
        parts = (_relative(self.cwd, root), _relative(self.input, root), self.output, self.arch)
        text = "\0".join(parts)
        return hashlib.sha256(text.encode()).hexdigest()[:24]

    def compile_env(self) -> tuple[tuple[str, str], ...]:
        return tuple((k, self.env[k]) for k in COMPILE_ENV if k in self.env)


class Unusable(NamedTuple):
    """A record --retune must not use, and why; unit_globs is () when the
    file could not be read at all (then no unit can be told apart)."""

    path: Path
    why: str
    unit_globs: tuple[str, ...] = ()

    def __str__(self) -> str:
        return f"{self.path}: {self.why}"


def db_folder(acf_path: Path) -> Path:
    return acf_path.parent / ".nvcc-evo" / "compile-db"


def _root(acf_path: Path) -> Path:
    return Path(os.path.realpath(acf_path.parent))


def _relative(path: str, root: Path) -> str:
    """`path` relative to `root` where it lies under it, else as it is."""
    relative = os.path.relpath(os.path.realpath(path), root) if os.path.isabs(path) else path
    return path if relative == ".." or relative.startswith(".." + os.sep) else relative


def record(acf_path: Path, entry: CompileRecord, keep_existing: bool = False) -> None:
    """Record `entry`, replacing the record of the same output; with
    `keep_existing` (a retune's bench command building a candidate) an output
    already recorded keeps its record: how the user's build compiles it."""
    root = _root(acf_path)
    folder = db_folder(acf_path)
    if keep_existing and (folder / f"{entry.key(root)}.json").exists():
        return
    folders(acf_path.parent, *folder.relative_to(acf_path.parent).parts)     # no link followed
    data = {k: (list(v) if isinstance(v, tuple) else v) for k, v in entry._asdict().items()}
    data.update(cwd=_relative(entry.cwd, root), input=_relative(entry.input, root), root=str(root))
    replace_file(folder / f"{entry.key(root)}.json", json.dumps(data, indent=1))


def _moved(text: str, old: str, new: str) -> str:
    """A recorded value with the old project folder replaced by the new one."""
    if text == old:
        return new
    return text.replace(old + os.sep, new + os.sep)


# What each field must hold; anything else makes the record unreadable (TypeError).
_STRINGS = (str,)
FIELD_TYPES: dict[str, str | tuple[type, ...]] = {
    "argv": "strings", "cwd": _STRINGS, "env": "environment", "nvcc": _STRINGS, "toolkit": _STRINGS,
    "input": _STRINGS, "output": _STRINGS, "unit_index": (int,), "unit_globs": "strings",
    "arch": _STRINGS, "target": (str, type(None)), "fingerprint": _STRINGS, "stale": "strings",
    "flags": "strings", "time": (int, float)}


def _check_types(entry: CompileRecord) -> None:
    for name, kind in FIELD_TYPES.items():
        value = getattr(entry, name)
        if kind == "strings":
            ok = isinstance(value, tuple) and all(isinstance(v, str) for v in value)
        elif kind == "environment":
            ok = isinstance(value, dict) and all(isinstance(k, str) and isinstance(v, str)
                                                 for k, v in value.items())
        else:
            ok = (not isinstance(kind, str) and isinstance(value, kind)  # (a tuple of types)
                  and not (kind == (int,) and isinstance(value, bool)))
        if not ok:
            raise TypeError(f"field '{name}' holds {value!r}")


def _decode(data: dict, root: Path) -> CompileRecord | str:
    """The record for the ACF folder `root`, or why it cannot be used."""
    old = data.pop("root", None)
    data = {k: tuple(v) if isinstance(v, list) else v for k, v in data.items()}
    missing = [f for f in CompileRecord._fields if f not in data]
    unknown = [k for k in data if k not in CompileRecord._fields]
    if missing or unknown:   # another nvcc-evo's, or no record at all: say which fields
        said = [f"missing {', '.join(missing)}"] * bool(missing)
        said += [f"unknown {', '.join(unknown)}"] * bool(unknown)
        raise TypeError(f"not a compile record of this nvcc-evo ({'; '.join(said)})")
    entry = CompileRecord(**data)
    _check_types(entry)
    if old is not None and not isinstance(old, str):
        raise TypeError(f"field 'root' holds {old!r}")
    if old is None and os.path.isabs(entry.input) and _relative(entry.input, root) == entry.input:
        return f"recorded for a file outside {root} ({entry.input}), by an older nvcc-evo"
    if old is not None and old != str(root):
        entry = entry._replace(argv=tuple(_moved(a, old, str(root)) for a in entry.argv),
                               env={k: _moved(v, old, str(root)) for k, v in entry.env.items()},
                               output=_moved(entry.output, old, str(root)))
    entry = entry._replace(cwd=str(root / entry.cwd), input=str(root / entry.input))
    if not os.path.isdir(entry.cwd):
        return f"its working folder {entry.cwd} is gone"
    if not os.path.isfile(entry.input):
        return f"its input {entry.input} is gone"
    return entry


def scan(acf_path: Path) -> tuple[list[CompileRecord], list[Unusable]]:
    """Every usable record, and every file that is not, with the reason."""
    root = _root(acf_path)
    entries, unusable = [], []
    for path in sorted(db_folder(acf_path).glob("*.json")):
        try:
            data = json.loads(path.read_text())
            globs = data.get("unit_globs", []) if isinstance(data, dict) else []
            globs = tuple(globs) if isinstance(globs, list) and all(isinstance(g, str)
                                                                    for g in globs) else ()
            if not isinstance(data, dict):
                raise TypeError(f"not a compile record (JSON {type(data).__name__}, not an object)")
            found = _decode(dict(data), root)
        except BROKEN_FILE as error:
            unusable.append(Unusable(path, f"unreadable ({type(error).__name__}: {error})"))
            continue
        if isinstance(found, str):
            unusable.append(Unusable(path, found, globs))
        else:
            entries.append(found)
    return entries, unusable


def read_all(acf_path: Path) -> list[CompileRecord]:
    return scan(acf_path)[0]


def relevant_env(environ: Mapping[str, str]) -> dict[str, str]:
    """The variables of `environ` a compile's record keeps (RELEVANT_ENV)."""
    return {k: environ[k] for k in RELEVANT_ENV if k in environ}


def by_output(acf_path: Path) -> dict[str, CompileRecord]:
    """The latest record for each object file (absolute path), for LTO links."""
    found: dict[str, CompileRecord] = {}
    for entry in sorted(read_all(acf_path), key=lambda e: e.time):
        if entry.output:
            found[os.path.abspath(os.path.join(entry.cwd, entry.output))] = entry
    return found
