"""What the injection library's processes wrote: kernel times per name and launch shape.

One file per process (`kernels-PID-NS-XXXXXX.tsv` in the run's folder, named
by NVCC_EVO_KERNEL_TIMES; NS the pid namespace, XXXXXX a random part: one
pid in two containers names two files): children, forked ones and MPI ranks
write their own, and a run's times are the sum over all its files.
`environment` is what a run is given so that the CUDA driver loads the
library; `time_of` is the GPU time of a set of kernels in a run (the command
backend's `metric NAME kernels`).
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Callable, Iterable, NamedTuple

TIMES_ENV = "NVCC_EVO_KERNEL_TIMES"
INJECTION_ENV = "CUDA_INJECTION64_PATH"
HEADER = "# nvcc-evo kernel times 1"


class KernelTime(NamedTuple):
    """One kernel at one launch shape in a run: its calls and their GPU time."""

    name: str                         # as the driver knows it: the mangled symbol, a PTX entry
    calls: int
    total_ns: int
    least_ns: int
    most_ns: int
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    registers: int                    # per thread
    shared: int                       # bytes a block, static and dynamic

    @property
    def shape(self) -> tuple:
        return self.name, self.grid, self.block, self.registers, self.shared


def environment(folder: str, library: str) -> dict[str, str]:
    """What a run's environment gets: the library for the driver, the folder for its files."""
    return {INJECTION_ENV: library, TIMES_ENV: folder}


def _row(line: str) -> KernelTime:
    parts = line.rstrip("\n").split("\t")
    if len(parts) != 13:
        raise ValueError(f"{len(parts)} fields, not 13")
    n = [int(p) for p in parts[:12]]
    return KernelTime(parts[12], n[0], n[1], n[2], n[3], (n[4], n[5], n[6]), (n[7], n[8], n[9]),
                      n[10], n[11])


def read_file(path: Path) -> tuple[list[KernelTime], int]:
    """One process's rows and the records CUPTI dropped (ValueError: not such a file)."""
    lines = path.read_text(errors="replace").splitlines()
    if not lines or not lines[0].startswith(HEADER):
        raise ValueError("not a kernel-times file of nvcc-evo")
    dropped = next((int(w[8:]) for w in lines[0].split() if w.startswith("dropped=")), 0)
    return [_row(line) for line in lines[1:] if line.strip()], dropped


def read_run(folder: str) -> tuple[list[KernelTime], list[str]]:
    """Every process's rows of a run, merged by name and shape, and what could not be read or
    was dropped."""
    rows: list[KernelTime] = []
    problems = []
    try:
        names = sorted(n for n in os.listdir(folder)
                       if n.startswith("kernels-") and n.endswith(".tsv"))
    except OSError as error:
        return [], [f"{folder}: {error.strerror}"]
    for name in names:
        try:
            found, dropped = read_file(Path(folder) / name)
        except (OSError, ValueError) as error:
            problems.append(f"{name}: {error}")
            continue
        rows += found
        if dropped:
            problems.append(f"{name}: {dropped} kernel record(s) dropped by CUPTI or unfinished at "
                            "the process's end (no end time): its times are short of the run's")
    return merged(rows), problems


def merged(rows: Iterable[KernelTime]) -> list[KernelTime]:
    """Rows of one name and shape added up (several processes, several files)."""
    kept: dict[tuple, KernelTime] = {}
    for row in rows:
        old = kept.get(row.shape)
        kept[row.shape] = row if old is None else old._replace(
            calls=old.calls + row.calls, total_ns=old.total_ns + row.total_ns,
            least_ns=min(old.least_ns, row.least_ns), most_ns=max(old.most_ns, row.most_ns))
    return sorted(kept.values(), key=lambda r: (-r.total_ns, r.shape))


def time_of(rows: Iterable[KernelTime], mine: Callable[[str], bool]) -> tuple[float, int]:
    """The GPU time (ms) of the kernels `mine` accepts, and how many calls they made."""
    chosen = [row for row in rows if mine(row.name)]
    return sum(row.total_ns for row in chosen) / 1e6, sum(row.calls for row in chosen)
