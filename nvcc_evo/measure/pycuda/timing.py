"""Timing and energy in the measuring process (measure.pycuda.worker), with
the CUDA module it imported (pycuda.driver): events around each launch
after warm-up, the L2 flushed before each launch where the data would
otherwise stay in it, racing an incumbent and settling at checkpoints
(measure.stats); energy per launch from NVML's counter; the device's copy
rate, the ceiling a memory-bound kernel is measured against."""
from __future__ import annotations

import time
from typing import Any, Callable, NamedTuple

import numpy as np

from nvcc_evo.acf.bench.spec import BenchPlan
from nvcc_evo.measure import Clock
from nvcc_evo.measure.stats import (ENERGY_LEAST, clearly_slower, energy_window, race_checkpoints,
                                    repetitions, settled)


class Incumbent(NamedTuple):      # what a race is run against
    median: float
    margin: float


class Timer:
    """Times launches of one device (`l2`: its L2 size, flushed through a scratch allocation twice
    as large)."""

    def __init__(self, cuda: Any, l2: int) -> None:
        self.cuda, self.l2 = cuda, l2
        self.scratch = cuda.mem_alloc(max(2 * l2, 1 << 20))

    def flush(self) -> None:
        self.cuda.memset_d8_async(self.scratch, 0, 2 * self.l2)

    def time(self, launch: Callable[[], None], plan: BenchPlan, min_seconds: float, clock: Clock,
             race: Incumbent | None = None, settle: bool = False) -> tuple[list[float], int, str]:
        """Events around each launch, after warm-up. With `race` (the
        incumbent's median and margin), the launches so far are tested at
        checkpoints and timing stops once this candidate is clearly slower;
        with `settle`, it also stops there once the median is known well
        enough (stats.settled). Returns (times in us, the launches planned,
        why timing stopped early: "raced", "settled" or "")."""
        cuda = self.cuda
        flush = plan.bytes_moved < 4 * self.l2
        start, end = cuda.Event(), cuda.Event()
        for _ in range(3):
            launch()
        start.record()
        launch()
        end.record()
        end.synchronize()
        count = repetitions(end.time_since(start) / 1e3, min_seconds)
        clock.lap("warm-up")
        times: list[float] = []
        stopped = ""
        for stop in (race_checkpoints(count) if race or settle else (count,)):
            pairs = [(cuda.Event(), cuda.Event()) for _ in range(stop - len(times))]
            for begin, finish in pairs:
                if flush:
                    self.flush()
                begin.record()
                launch()
                finish.record()
            pairs[-1][1].synchronize()
            times += [finish.time_since(begin) * 1e3 for begin, finish in pairs]
            if len(times) >= count:
                break
            if race and clearly_slower(times, race.median, race.margin):
                stopped = "raced"
                break
            if settle and settled(times):
                stopped = "settled"
                break
        clock.lap("timing")
        return times, count, stopped


def copy_rate(cuda: Any, size: int = 1 << 30, repeats: int = 20) -> float:
    """Device-to-device copy rate (bytes read + written per second)."""
    src, dst = cuda.mem_alloc(size), cuda.mem_alloc(size)
    cuda.memset_d8(src, 1, size)
    start, end, times = cuda.Event(), cuda.Event(), []
    for _ in range(repeats):
        start.record()
        cuda.memcpy_dtod_async(dst, src, size)
        end.record()
        end.synchronize()
        times.append(end.time_since(start) / 1e3)
    return 2 * size / float(np.median(times))


def energy(cuda: Any, nvml: Any, launch: Callable[[], None], kernel: float,
           seconds: float = 1.0) -> dict:
    """Energy per launch from NVML's total-energy counter (`nvml`: the device's handle),
    between two of its steps (stats.energy_window). Launches run in batches of about a
    millisecond (`kernel`: one launch's seconds), the counter read after each, so a step is seen
    within a batch; a batch's share of the window stays under 1% (longer kernels get a longer
    window, up to `seconds`)."""
    import pynvml
    cuda.Context.synchronize()
    per_batch = max(1, min(16, int(1e-3 / max(kernel, 1e-7))))

    def batch() -> int:
        for _ in range(per_batch):
            launch()
        cuda.Context.synchronize()
        return per_batch
    least = min(seconds, max(ENERGY_LEAST, 200 * per_batch * kernel))
    return energy_window(batch, lambda: pynvml.nvmlDeviceGetTotalEnergyConsumption(nvml),
                         time.monotonic, seconds, least=least)


def nvml_handle(index: int) -> Any:
    """NVML's handle of the device (None: no NVML library or no permission; energy is then dropped,
    said in the worker's hello)."""
    try:
        import pynvml
        pynvml.nvmlInit()
        return pynvml.nvmlDeviceGetHandleByIndex(index)
    except Exception:
        return None
