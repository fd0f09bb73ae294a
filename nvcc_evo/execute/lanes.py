"""Several measuring lanes at once: one Backend per GPU (or per Ray worker),
each candidate handed to whichever lane is free.

A lane is a Backend with its own baseline: on a GPU, its own measuring
process (a WorkerPool on that device) whose first measurement is the
baseline's, so every candidate is checked and timed against the baseline of
the GPU that measured it. Lanes are normalised to lane 0: `calibrate` times
the baseline on every lane, and a lane's runtime and energy are scaled by
lane 0's baseline over its own (`scaled`), so that each stored runtime is in
lane 0's units and the search compares every candidate with one baseline.
Spreads are relative and stay as measured. The confirmation (winner and
baseline, interleaved) and the baseline's drift stay on lane 0.

The Evaluator (execute.evaluate, through its `Lanes` protocol) measures a
started batch on the lanes, a thread per lane (`submit`), and gives the
evaluations back in genome order; a binary the same as one measured or in
flight reuses that measurement, as in one lane, so for a deterministic
backend the records are those of the serial run. Each record is appended to
the store the moment it is measured (Store.append is locked: appenders
never interleave). The lanes know nothing of the Evaluator.
A lane that is lost (a Ray worker or node gone: `LaneLost`) is dropped and
its candidate tried on another lane, then recorded as failed (`lost`).
"""
from __future__ import annotations

import math
import queue
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Callable, TypeVar

from nvcc_evo.cubin.compile import CompileResult
from nvcc_evo.driver.specs import Gpus
from nvcc_evo.engine.space import Genome
from nvcc_evo.errors import EnvironmentProblem, UsageError
from nvcc_evo.measure import Measurement, failed
from nvcc_evo.measure.backend import Backend, Composed, composed
from nvcc_evo.status import Status

T = TypeVar("T")
NORMALISED = ("runtime", "energy")   # per-GPU quantities; registers, spills, ... are the binary's
LOST = Status.LOST


class LaneLost(Exception):
    """The lane's worker or node is gone; its candidate is tried elsewhere."""


@dataclass
class Lane:
    index: int
    measurer: Backend
    name: str = ""                                   # "GPU 1", "ray worker 3"
    scale: dict = field(default_factory=dict)         # metric -> factor to lane 0's units


def scale_to(own: Measurement, reference: Measurement) -> dict:
    """Factors from a lane's baseline measurement to lane 0's: metric ->
    reference / own, for the NORMALISED metrics both have (finite, positive)."""
    if not (own.ok and reference.ok):
        return {}
    factors = {}
    for metric in NORMALISED:
        mine, theirs = own.get(metric, math.nan), reference.get(metric, math.nan)
        if math.isfinite(mine) and math.isfinite(theirs) and mine > 0 and theirs > 0:
            factors[metric] = theirs / mine
    return factors


def scaled(measurement: Measurement, scale: dict) -> Measurement:
    """A lane's measurement in lane 0's units."""
    if not measurement.ok or not scale:
        return measurement
    return replace(measurement,
                   metrics=tuple((k, v * scale.get(k, 1.0)) for k, v in measurement.metrics))


def choose_gpus(spec: Gpus | None, names: list[str], first: int = 0) -> list[int]:
    """The devices `--gpus` names among those visible (`names[i]`: device
    i's model), lane 0 first: `all` (device `first`, then the others of its
    model; other models left out), `count:N` (the first N), device numbers
    `1` or `0,2` (those, of one model). Raises UsageError otherwise."""
    count = len(names)
    if spec is None or not (spec.count or spec.devices):
        return [first] + [i for i in range(count) if i != first and
                          names[i] == names[first]] if count else []
    if spec.count > count:
        raise UsageError(f"--gpus {spec.text}: {count} GPU(s) visible")
    numbers = list(spec.devices) or list(range(spec.count))
    bad = [n for n in numbers if not 0 <= n < count]
    if bad or len(set(numbers)) != len(numbers):
        raise UsageError(f"--gpus {spec.text}: devices 0..{count - 1} are visible, each named once")
    models = {names[n] for n in numbers}
    if len(models) > 1:
        raise UsageError(f"--gpus {spec.text}: GPUs of different models "
                         f"({', '.join(sorted(models))}) are never mixed in one search; name those "
                         "of one model")
    return numbers


class LaneSet:
    """The lanes of one search, and the threads that drive them."""

    def __init__(self, lanes: list[Lane], retries: int = 1,
                 closing: Callable[[], object] | None = None) -> None:
        self.retries, self.closing = retries, closing      # closing(): at close (the cluster's)
        self.notes: list[str] = []
        self._drive(lanes)

    def _drive(self, lanes: list[Lane]) -> None:
        """Measure on these lanes (all of them, or those the baseline ran on)."""
        if not lanes:
            raise EnvironmentProblem("no measuring lane")
        self.lanes = lanes
        self.free: queue.Queue = queue.Queue()
        for lane in lanes:
            self.free.put(lane)
        self.alive = len(lanes)
        self.guard = threading.Lock()
        self.pool = ThreadPoolExecutor(max_workers=len(lanes), thread_name_prefix="lane")

    def __len__(self) -> int:
        return len(self.lanes)

    def _take_lane(self) -> Lane:
        while True:
            with self.guard:
                if self.alive == 0:
                    raise EnvironmentProblem("every measuring lane was lost: "
                                             + "; ".join(self.notes))
            try:
                return self.free.get(timeout=0.5)
            except queue.Empty:
                continue

    def measure(self, genome: Genome, flags: tuple[str, ...],
                result: CompileResult | None) -> Measurement:
        """One candidate on the first free lane, in lane 0's units; a lost
        lane's candidate is tried on another, then recorded as `lost`."""
        problem = ""
        for _ in range(self.retries + 1):
            lane = self._take_lane()
            try:
                measurement = lane.measurer.measure(genome, flags, result)
            except LaneLost as lost:
                problem = f"{lane.name or f'lane {lane.index}'} was lost: {lost}"
                with self.guard:
                    self.alive -= 1
                    self.notes.append(problem)
                continue
            except BaseException:              # the backend's own error (or an interrupt): the lane
                                               # is still there
                self.free.put(lane)
                raise
            self.free.put(lane)
            return scaled(measurement, lane.scale)
        return failed(LOST, f"{problem} (tried on {self.retries + 1} lanes)")

    def calibrate(self, genome: Genome, flags: tuple[str, ...],
                  result: CompileResult | None) -> list[Measurement]:
        """The baseline timed on every lane at once; each lane's scale to lane
        0's. A lane whose baseline fails is dropped (said in `notes`)."""
        runs = list(self.pool.map(lambda lane: lane.measurer.measure(genome, flags, result),
                                  self.lanes))
        if not runs[0].ok:
            return runs
        for lane, run in zip(self.lanes, runs):
            lane.scale = scale_to(run, runs[0]) if lane.index else {}
            if not run.ok:
                self.notes.append(f"{lane.name}: the baseline failed there ({run.status}); lane "
                                  "left out")
        kept = [lane for lane, run in zip(self.lanes, runs) if run.ok]
        if len(kept) < len(self.lanes):
            self.pool.shutdown(wait=True)
            self._drive(kept)
        return runs

    def race(self, median: float, spread: float) -> None:
        """Racing's incumbent, told to each lane in its own units."""
        for lane in self.lanes:
            if lane.measurer.race is not None:
                lane.measurer.race(median / lane.scale.get("runtime", 1.0), spread)

    def describe(self) -> str:
        scales = ", ".join(f"{lane.name} x{lane.scale['runtime']:.4f}" for lane in self.lanes[1:]
                           if "runtime" in lane.scale)
        count = f"{len(self.lanes)} lane{'s' if len(self.lanes) > 1 else ''}"
        return f"{count} ({self.lanes[0].measurer.describe}" + \
            (f"; runtimes scaled to {self.lanes[0].name}'s baseline: {scales})" if scales else ")")

    def measurer(self) -> Composed:
        """What the search holds: measure on any lane; confirm and drift on lane 0."""
        first = self.lanes[0].measurer
        return composed(first, measure=self.measure,
                        race=self.race if first.race is not None else None,
                        describe=self.describe())

    def submit(self, take: Callable[..., T], genome: Genome, flags: tuple[str, ...],
               result: CompileResult | None) -> Future[T]:
        """One candidate's `take` (the Evaluator's: measured through `measure`,
        on the first free lane, then recorded) on a thread of the lanes' own."""
        return self.pool.submit(take, genome, flags, result)

    def close(self) -> None:
        self.pool.shutdown(wait=True)
        if self.closing is not None:
            self.closing()
