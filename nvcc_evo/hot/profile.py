"""A kernel profile: the kernels a run launched, by GPU time, and where it came from.

Three shapes: a run of `--hot -- COMMAND` (the injection's records,
measure.profile.records: mangled names, launch shapes, registers), the same
saved as JSON under `.nvcc-evo/hot/` (`save`, `read_profile`), and Nsight
Systems' kernel summary (`nsys stats --report cuda_gpu_kern_sum --format
csv`: demangled names, no shapes; alone, or among the other reports of an
`nsys stats --format csv`). A file of another shape is a located
error (`path:LINE:COL: error: ...`).
"""
from __future__ import annotations

import csv
import io
import json
import time
from dataclasses import dataclass, field
from pathlib import Path

from nvcc_evo.errors import Diagnostic, EvoError, LocatedError, Location
from nvcc_evo.measure.profile.records import KernelTime
from nvcc_evo.system.files import folders, read_regular, replace

FORMAT = "nvcc-evo kernel profile"
VERSION = 1
NSYS_COLUMNS = ("Time (%)", "Total Time (ns)", "Instances", "Avg (ns)", "Med (ns)", "Min (ns)",
                "Max (ns)", "StdDev (ns)", "Name")
NO_SHAPE = (0, 0, 0)


@dataclass(frozen=True)
class Profile:
    """What one run's kernels cost: `mangled` when the names are the driver's (ours), else demangled
    (nsys)."""

    kernels: tuple[KernelTime, ...]
    mangled: bool
    source: str  # "the run of COMMAND", "PATH (Nsight Systems)", ...
    command: tuple[str, ...] = ()
    cwd: str = ""                                # where the command ran (absolute)
    exit: int | None = None
    seconds: float | None = None
    problems: tuple[str, ...] = field(default=())

    @property
    def total_ns(self) -> int:
        return sum(k.total_ns for k in self.kernels)

    def by_name(self) -> list[tuple[str, int, int, tuple[KernelTime, ...]]]:
        """(name, calls, total ns, its shapes) per kernel name, most time first."""
        names: dict[str, list[KernelTime]] = {}
        for kernel in self.kernels:
            names.setdefault(kernel.name, []).append(kernel)
        rows = [(name, sum(k.calls for k in ks), sum(k.total_ns for k in ks), tuple(ks))
                for name, ks in names.items()]
        return sorted(rows, key=lambda row: (-row[2], row[0]))


def to_json(profile: Profile) -> str:
    kernels = [{**k._asdict(), "grid": list(k.grid), "block": list(k.block)}
               for k in profile.kernels]
    return json.dumps({"format": FORMAT, "version": VERSION, "source": profile.source,
                       "command": list(profile.command), "cwd": profile.cwd, "exit": profile.exit,
                       "seconds": profile.seconds,
                       "when": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "kernels": kernels},
                      indent=1) + "\n"


def save(folder: Path, profile: Profile) -> Path:
    """The profile as `folder/.nvcc-evo/hot/profile.json` (no link followed); its path."""
    where = Path(folders(folder, ".nvcc-evo", "hot")) / "profile.json"
    replace(where, to_json(profile))
    return where


def _error(path: str, text: str, line: int, column: int, message: str) -> LocatedError:
    lines = text.splitlines()
    shown = lines[line - 1] if 0 < line <= len(lines) else ""
    return LocatedError([Diagnostic(Location(path, line, column), message, shown)])


def read_profile(path: str) -> Profile:
    """A saved profile of ours or an nsys kernel-summary CSV (LocatedError: neither, or one of no
    kernel; EvoError: it cannot be read)."""
    try:
        text = read_regular(path).decode("utf-8", errors="replace").lstrip("\ufeff")
    except OSError as error:
        raise EvoError(f"--hot --from {path}: {error.strerror or error}") from None
    profile = _ours(path, text) if text.lstrip().startswith("{") else _nsys(path, text)
    if not profile.kernels:
        raise _error(path, text, 1, 1, "the profile holds no kernel: nothing to rank (was it made "
                                       "of a run that launched none?)")
    return profile


def _ours(path: str, text: str) -> Profile:
    try:
        data = json.loads(text)
    except ValueError as problem:
        line, column = getattr(problem, "lineno", 1), getattr(problem, "colno", 1)
        raise _error(path, text, line, column,
                     f"not a kernel profile: {getattr(problem, 'msg', problem)}") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT or data.get("version") != VERSION:
        raise _error(path, text, 1, 1, "not a kernel profile of nvcc-evo (JSON without "
                                       f"\"format\": \"{FORMAT}\", \"version\": {VERSION}), nor "
                                       "Nsight Systems' kernel summary CSV")
    kernels = []
    for index, item in enumerate(data.get("kernels") or ()):
        try:
            grid, block = [int(v) for v in item["grid"]], [int(v) for v in item["block"]]
            kernels.append(KernelTime(str(item["name"]), int(item["calls"]), int(item["total_ns"]),
                                      int(item["least_ns"]), int(item["most_ns"]),
                                      (grid[0], grid[1], grid[2]),
                                      (block[0], block[1], block[2]), int(item["registers"]),
                                      int(item["shared"])))
        except (KeyError, TypeError, ValueError, IndexError) as problem:
            at = text.find('"name"', _nth(text, '"name"', index))
            line = text.count("\n", 0, max(at, 0)) + 1
            raise _error(path, text, line, 1,
                         f"kernel {index + 1} is not a kernel record ({problem!r})") from None
    command = data["command"] if isinstance(data.get("command"), list) else []
    return Profile(tuple(kernels), True, f"{path} (saved: {data.get('source') or 'a run'})",
                   tuple(map(str, command)), str(data.get("cwd") or ""), data.get("exit"),
                   data.get("seconds"))


def _nth(text: str, needle: str, index: int) -> int:
    at = -1
    for _ in range(index + 1):
        at = text.find(needle, at + 1)
        if at < 0:
            return 0
    return at


def _nsys(path: str, text: str) -> Profile:
    rows = list(csv.reader(io.StringIO(text)))
    # `nsys stats --format csv` of several reports prints each one's table in turn, a blank line
    # after each (the OS runtime's and the CUDA API's begin with Time (%) too): the kernels' is the
    # one with every column, and ends at its blank line
    headers = [i for i, row in enumerate(rows) if row and row[0].strip() == NSYS_COLUMNS[0]]
    start = next((i for i in headers if set(NSYS_COLUMNS) <= {c.strip() for c in rows[i]}),
                 headers[0] if headers else None)
    if start is None:
        raise _error(path, text, 1, 1, "not a kernel profile: neither nvcc-evo's (JSON) nor Nsight "
                                       "Systems' kernel summary (`nsys stats --report "
                                       "cuda_gpu_kern_sum --format csv`: a header "
                                       f"{','.join(NSYS_COLUMNS)})")
    header = [c.strip() for c in rows[start]]
    missing = [c for c in NSYS_COLUMNS if c not in header]
    if missing:
        raise _error(path, text, start + 1, 1, "the kernel summary lacks the column(s) "
                                               f"{', '.join(missing)} (expected "
                                               f"{','.join(NSYS_COLUMNS)})")
    column = {name: header.index(name) for name in NSYS_COLUMNS}
    kernels: list[KernelTime] = []
    for number, row in enumerate(rows[start + 1:], start + 2):
        if not row or not any(cell.strip() for cell in row):
            if kernels:
                break                   # (the next report's table, if any, follows)
            continue
        if len(row) < len(header):
            raise _error(path, text, number, 1, f"row {number - start - 1} has {len(row)} "
                                                f"field(s), not the header's {len(header)}")
        numbers = {}
        for name in ("Total Time (ns)", "Instances", "Min (ns)", "Max (ns)"):
            try:
                numbers[name] = int(float(row[column[name]]))
            except ValueError:
                # (unquoted cells before it)
                at = 1 + sum(len(cell) + 1 for cell in row[:column[name]])
                raise _error(path, text, number, at,
                             f"{name}: {row[column[name]]!r} is not a number") from None
        kernels.append(KernelTime(row[column["Name"]], numbers["Instances"],
                                  numbers["Total Time (ns)"],
                                  numbers["Min (ns)"], numbers["Max (ns)"], NO_SHAPE, NO_SHAPE, 0,
                                  0))
    return Profile(tuple(kernels), False, f"{path} (Nsight Systems' kernel summary)")
