"""The command backend's `metric NAME kernels`: a unit's own kernels' GPU time in a bench run.

Each run gets the injection library and a folder of its own for the
processes' files (measure.profile.records); its metric is the time of the
kernels the candidate's build defines (the symbols of its cubin, as the
search compiled it: `learn`), whatever else the program runs. The command's
output is not read.
"""
from __future__ import annotations

import os
from collections.abc import Hashable

from typing import Mapping

from nvcc_evo.cubin.sass import cubin_sections
from nvcc_evo.driver.cmdline.cuda_driver import device_count
from nvcc_evo.errors import EnvironmentProblem
from nvcc_evo.measure.profile.library import find_cupti, library, toolkit_paths
from nvcc_evo.measure.profile.records import environment, read_run, time_of


def kernel_names(cubin: bytes) -> frozenset[str]:
    """The kernels a cubin defines (its `.text.NAME` sections)."""
    return frozenset(name[len(".text."):] for name in cubin_sections(cubin)
                     if name.startswith(".text."))


NO_DRIVER = "no CUDA driver (libcuda.so.1 cannot be loaded, or it does not start)"


def gpu_missing() -> str:
    """Why no kernel runs on a GPU of this machine ("" when one can)."""
    count = device_count()
    if count is None:
        return NO_DRIVER
    if count == 0:
        return "no CUDA device visible (the driver sees none; CUDA_VISIBLE_DEVICES?)"
    return ""


def unrecordable(environ: Mapping[str, str], nvcc: str, gpu_hint: str) -> list[str]:
    """What this machine lacks to record kernel times, each with how to get it (none: it can): a GPU
    (`gpu_hint` follows the driver's absence: what to do without one) and CUPTI."""
    gpu = gpu_missing()
    problems = [f"{gpu}: {gpu_hint}" if gpu == NO_DRIVER else gpu]
    try:
        find_cupti(environ, toolkit_paths(nvcc)[0])
    except EnvironmentProblem as error:
        problems.append(str(error))
    return [p for p in problems if p]


class KernelClock:
    """The injection for a bench's runs and the reading of one unit's kernels' time."""

    def __init__(self, nvcc: str = "", active: bool = True):
        # (inactive: a bench without such a metric; no injection)
        self.nvcc, self.active = nvcc, active
        self.library: str | None = None
        self.own: dict[Hashable, frozenset[str]] = {}
        self.current: frozenset[str] = frozenset()

    def learn(self, genome: Hashable, cubin: bytes) -> None:
        """The kernels of a candidate's build (before its runs)."""
        self.own[genome] = kernel_names(cubin)

    def knows(self, genome: Hashable) -> bool:
        return genome in self.own

    def use(self, genome: Hashable) -> None:
        """The candidate the next runs build: their metric is its kernels' time."""
        self.current = self.own.get(genome, frozenset())

    def environment(self, scratch: str) -> dict[str, str]:
        """What a run's environment gets (the library built on first use: EnvironmentProblem
        without CUPTI)."""
        if not self.active:
            return {}
        if self.library is None:
            self.library = library(os.environ, self.nvcc)
        folder = os.path.join(scratch, "kernel-times")
        os.makedirs(folder, mode=0o700, exist_ok=True)
        return environment(folder, self.library)

    def read(self, scratch: str) -> tuple[float, str]:
        """(ms of the unit's kernels in the run, "") or (nan, why there is no such time)."""
        if not self.active:
            return float("nan"), "no kernel metric"
        rows, problems = read_run(os.path.join(scratch, "kernel-times"))
        milliseconds, calls = time_of(rows, self.current.__contains__)
        if calls and not problems:
            return milliseconds, ""
        if calls:          # (records dropped or unfinished, a file unreadable: the time is short)
            return float("nan"), ("the kernels' time of this run is not whole: "
                                  + "; ".join(problems))
        ran = f"; it ran {len(rows)} other kernel(s)" if rows else "; it ran no kernel at all"
        said = f" ({'; '.join(problems)})" if problems else ""
        known = ", ".join(sorted(self.current)[:3]) or "none known"
        known += ", ..." if len(self.current) > 3 else ""
        return float("nan"), f"none of the unit's kernels ({known}) ran{ran}{said}"
