"""The compile database: how the build compiles each covered unit.

One JSON file per (working directory, input, output) under
`<ACF folder>/.nvcc-evo/compile-db/`, replaced atomically, so that `make -j`
never interleaves two writers. `--retune` rebuilds a unit exactly as recorded.
"""
from __future__ import annotations

import hashlib
import json
import os
from typing import NamedTuple
from pathlib import Path

from nvcc_evo.shim import replace_file

RELEVANT_ENV = ("NVCC_PREPEND_FLAGS", "NVCC_APPEND_FLAGS", "CUDA_HOME", "CUDA_PATH", "PATH",
                "NVCC_EVO_GPU", "NVCC_EVO_STALE")


class CompileRecord(NamedTuple):
    argv: tuple[str, ...]
    cwd: str
    env: dict
    nvcc: str
    toolkit: str
    input: str
    output: str
    unit_index: int
    unit_globs: tuple[str, ...]
    arch: str
    target: str | None
    fingerprint: str
    stale: tuple[str, ...]
    flags: tuple[str, ...]
    time: float

    @property
    def key(self) -> str:
        text = f"{self.cwd}\0{self.input}\0{self.output}\0{self.arch}"
        return hashlib.sha256(text.encode()).hexdigest()[:24]


def db_folder(acf_path: Path) -> Path:
    return acf_path.parent / ".nvcc-evo" / "compile-db"


def record(acf_path: Path, entry: CompileRecord) -> None:
    folder = db_folder(acf_path)
    folder.mkdir(parents=True, exist_ok=True)
    data = {k: (list(v) if isinstance(v, tuple) else v) for k, v in entry._asdict().items()}
    replace_file(folder / f"{entry.key}.json", json.dumps(data, indent=1))


def read_all(acf_path: Path) -> list[CompileRecord]:
    entries = []
    for path in sorted(db_folder(acf_path).glob("*.json")):
        try:
            data = json.loads(path.read_text())
            entries.append(CompileRecord(**{k: tuple(v) if isinstance(v, list) else v for k, v in data.items()}))
        except (OSError, ValueError, TypeError):
            continue
    return entries


def relevant_env(environ) -> dict:
    return {k: environ[k] for k in RELEVANT_ENV if k in environ}


def by_output(acf_path: Path) -> dict[str, CompileRecord]:
    """The latest record for each object file (absolute path), for LTO links."""
    found: dict[str, CompileRecord] = {}
    for entry in sorted(read_all(acf_path), key=lambda e: e.time):
        if entry.output:
            found[os.path.abspath(os.path.join(entry.cwd, entry.output))] = entry
    return found
