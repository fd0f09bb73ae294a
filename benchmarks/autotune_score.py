"""The auto-tuning methodology's performance score (Willemsen et al., "A
methodology for comparing optimization algorithms for auto-tuning", FGCS
2024; the `autotuning-methodology` package), for minimised objectives.

- The budget: the time random search is expected to need to come within
  `END` (95%) of the way from the space's median to its optimum. Random
  search without replacement reaches the i-th worst of N values after
  about ceil(i / (N + 1 - i)) draws (the paper's eq. 6); that count times
  the median cost of a configuration is the budget's end, and the same for
  `START` (1%) its start.
- The random baseline at a time t: t over the mean cost of a configuration
  gives M draws; their expected best is the round(M (N + 1) / (M + 1))-th
  worst value (eq. 6 again), joined smoothly (monotone cubic, PCHIP).
- A strategy's curve: at each t the best value found by then, as a rank in
  the space's sorted values, averaged over its repeated runs (the package
  fits these ranks by isotonic regression; the mean is the plain estimate of
  the same expectation) and read back as a value.
- The score of one space: the mean over t in [start, end] of
  (strategy - random) / (optimum - random): 0 is random search, 1 the
  optimum from the start. Over several spaces: the mean of their scores.

The budget and the baseline are the package's to the number (tests check
them against it). Its expected rank of the best of M draws is one rank
better than random search's own, so random search itself scores a little
below 0 where a budget ends near the optimum; kept, so that scores compare
with the paper's.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np
from scipy.interpolate import PchipInterpolator

START, END = 0.01, 0.95
RESOLUTION = 1000          # points of the time range a curve is read at


@dataclass(frozen=True)
class Trajectory:
    """One run: the simulated time at which each evaluation ended
    (non-decreasing, ms) and the value it found."""

    times: np.ndarray
    values: np.ndarray


def fevals_to_reach(values: np.ndarray, fraction: float) -> int:
    """Random draws expected to come `fraction` of the way from the median
    to the optimum (the package's `cutoff_point`)."""
    worst_first = np.sort(values)[::-1]
    optimum, median = worst_first[-1], float(np.median(values))
    target = optimum + (median - optimum) * (1 - fraction)
    i = int(np.argmax(worst_first <= target))
    if fraction != 1.0 and worst_first[i] == optimum and i > 0:
        i -= 1                              # the target is the optimum itself: one short of it
    return math.ceil(i / (len(values) + 1 - i))


@dataclass(frozen=True)
class TimeRange:
    start: float           # ms
    end: float

    def grid(self, points: int = RESOLUTION) -> np.ndarray:
        return np.linspace(self.start, self.end, points)


def time_range(values: np.ndarray, costs: np.ndarray) -> TimeRange:
    """[start, end] of the scored budget (the package's
    `cutoff_point_fevals_time_start_end`: at least two draws apart)."""
    first, last = fevals_to_reach(values, START), fevals_to_reach(values, END)
    if last - first < 2:
        first, last = (0, last + 2) if first == 0 else (first - 1, last + 1)
    median = float(np.median(costs))
    return TimeRange(first * median, last * median)


def random_curve(values: np.ndarray, costs: np.ndarray, times: np.ndarray) -> np.ndarray:
    """Random search's expected best value at each time."""
    worst_first = np.sort(values)[::-1]
    n = len(worst_first)
    draws = np.maximum(np.round(times / float(np.mean(costs))), 1).astype(int)
    best = worst_first[np.minimum(n - 1, np.round(draws * (n + 1) / (draws + 1)).astype(int))]
    keep = np.concatenate([[True], np.diff(draws) > 0])
    if keep.sum() < 2:
        return best
    smooth = np.linspace(draws[0], draws[-1], len(draws))
    return PchipInterpolator(draws[keep], best[keep])(smooth)


def best_so_far(run: Trajectory, times: np.ndarray, worst: float) -> np.ndarray:
    """The best value a run had found at each time. Before its first answer
    it counts that answer, as the package's fit does (clipped to its first
    point); a run with no answer has `worst`."""
    if not len(run.values):
        return np.full(len(times), worst)
    best = np.minimum.accumulate(run.values)
    return best[np.maximum(np.searchsorted(run.times, times, side="right") - 1, 0)]


def curve(runs: Sequence[Trajectory], times: np.ndarray, values: np.ndarray) -> np.ndarray:
    """The strategy's expected best value at each time: its runs' best so
    far, averaged as ranks in the space's sorted values (as the package
    does), so that random search's curve is the baseline's."""
    ordered = np.sort(values)
    ranks = [np.minimum(np.searchsorted(ordered, best_so_far(run, times, ordered[-1])), len(ordered) - 1)
             for run in runs]
    return ordered[np.round(np.mean(ranks, axis=0)).astype(int)]


def standardised(strategy: np.ndarray, random: np.ndarray, optimum: float) -> np.ndarray:
    """0 where the strategy is at random search's value, 1 at the optimum
    (0 where random search has reached the optimum itself: no room left)."""
    room = optimum - random
    return np.divide(strategy - random, room, out=np.zeros_like(random), where=room != 0)


def score(runs: Sequence[Trajectory], values: np.ndarray, costs: np.ndarray) -> float:
    """The methodology's performance score of a strategy's runs on one space."""
    times = time_range(values, costs).grid()
    random = random_curve(values, costs, times)
    return float(np.mean(standardised(curve(runs, times, values), random, float(values.min()))))
