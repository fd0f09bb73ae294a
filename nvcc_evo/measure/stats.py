"""Statistics for GPU timings: summaries, repetition counts, and the test
that decides whether a tuned build is really faster than the baseline."""
from __future__ import annotations

import math
from fractions import Fraction
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

SIGNIFICANCE = 0.01
# Medians of one binary re-measured on the H200 agree within about 0.5%
# (BENCHMARKS.md): a smaller gain is not worth a tuned entry.
MIN_GAIN = 0.005


@dataclass(frozen=True)
class Summary:
    median: float
    p20: float
    p80: float
    count: int

    @property
    def spread(self) -> float:
        """Relative width of the middle 60% of samples."""
        return (self.p80 - self.p20) / self.median if self.median > 0 else float("inf")

    def __str__(self) -> str:
        return f"{self.median:.4g} (p20 {self.p20:.4g}, p80 {self.p80:.4g}, n={self.count})"


def summarize(samples: Sequence[float]) -> Summary:
    values = np.asarray(samples, dtype=float)
    p20, median, p80 = np.percentile(values, [20, 50, 80])
    return Summary(float(median), float(p20), float(p80), len(values))


def repetitions(one_launch_s: float, min_seconds: float = 0.3, least: int = 20,
                most: int = 2000) -> int:
    """Enough launches that a short kernel is timed for long enough."""
    if one_launch_s <= 0:
        return most
    return int(min(most, max(least, np.ceil(min_seconds / one_launch_s))))


# Racing: a candidate's timing stops early when a sign test on its launches
# so far says it is slower than the incumbent by more than the margin. At
# most RACE_LOOKS looks, each at RACE_ALPHA, so a candidate as fast as the
# incumbent is stopped with probability under RACE_LOOKS * RACE_ALPHA.
RACE_ALPHA = 1e-3
RACE_FIRST = 10
RACE_LOOKS = 8


def race_checkpoints(count: int) -> tuple[int, ...]:
    """Launch counts at which a race looks: 10, 20, 40, ... and the full count."""
    looks: list[int] = []
    at = RACE_FIRST
    while at < count and len(looks) < RACE_LOOKS - 1:
        looks.append(at)
        at *= 2
    return (*looks, count)


def clearly_slower(samples: Sequence[float], incumbent: float, margin: float,
                   alpha: float = RACE_ALPHA) -> bool:
    """One-sided sign test: were so few launches faster than the incumbent's
    median (plus the margin) that, if this candidate were no slower than
    that, seeing it would have probability under `alpha`?"""
    n = len(samples)
    if n < RACE_FIRST:
        return False
    limit = incumbent * (1 + margin)
    below = sum(1 for s in samples if s < limit)
    # exactly, in integers: 2**n as a float overflows past about a thousand launches
    return Fraction(sum(math.comb(n, i) for i in range(below + 1)), 2 ** n) < alpha

# Settling: a candidate's timing also stops at a checkpoint once its median is
# known within SETTLE_PRECISION (the half-width of a distribution-free 95%
# interval, relative), well inside the 0.5% a gain must reach, after at least
# SETTLE_LEAST launches and SETTLE_SECONDS of them. The confirmation of a
# winner is not settled: it is timed in full, interleaved with the baseline.
SETTLE_PRECISION = MIN_GAIN / 2
SETTLE_LEAST = 80
SETTLE_SECONDS = 0.02


def median_interval(samples: Sequence[float], z: float = 1.96) -> tuple[float, float]:
    """A distribution-free interval for the median: the order statistics at
    ranks n/2 -+ z sqrt(n)/2 (about 95% with z = 1.96)."""
    values = np.sort(np.asarray(samples, dtype=float))
    n = len(values)
    half = z * math.sqrt(n) / 2
    low, high = max(0, math.floor(n / 2 - half)), min(n - 1, math.ceil(n / 2 + half))
    return float(values[low]), float(values[high])


def settled(samples_us: Sequence[float], precision: float = SETTLE_PRECISION,
            least: int = SETTLE_LEAST, seconds: float = SETTLE_SECONDS) -> bool:
    """Whether timing may stop: enough launches, long enough, and the median
    known within `precision` of itself."""
    if len(samples_us) < least or sum(samples_us) * 1e-6 < seconds:
        return False
    low, high = median_interval(samples_us)
    median = float(np.median(samples_us))
    return median > 0 and (high - low) / 2 <= precision * median


def enough(samples: Sequence[float], least: int, most: int, best: Summary | None = None,
           maximize: bool = False, settled: float = 2 * MIN_GAIN) -> bool:
    """Adaptive repetition: after `least` runs, stop once the median is known
    well enough (relative p20..p80 spread within `settled`), or once the
    candidate is clearly worse than the best so far (its better quintile
    beyond the best's median by more than that one's spread), or at `most`."""
    if len(samples) < least:
        return False
    if len(samples) >= most:
        return True
    mine = summarize(samples)
    if mine.spread <= settled:
        return True
    if best is None:
        return False
    margin = max(best.spread, MIN_GAIN)
    if maximize:
        return mine.p80 < best.median * (1 - margin)
    return mine.p20 > best.median * (1 + margin)


@dataclass(frozen=True)
class Verdict:
    test: str
    p_value: float
    effect: float            # baseline median / candidate median (> 1: candidate faster)
    noise: float             # the larger relative spread of the two
    significant: bool
    rounds: int = 0          # samples on each side
    judged: str = ""         # the metric judged where it is not a time ("" or a time: a speedup)

    def __str__(self) -> str:
        effect = f"speedup {self.effect:.4f}x"
        if self.judged:
            effect = f"{self.judged} {self.effect:.4f}x better"
        return (f"{self.test}: p={self.p_value:.2g}, {effect}, noise {self.noise:.2%}: "
                + ("significant" if self.significant else "not significant"))


TIME_UNITS = ("s", "ms", "us", "µs", "ns", "min")
TIME_NAMES = ("time", "runtime", "latency", "duration", "seconds", "elapsed")


def a_speed(name: str, unit: str = "", maximize: bool = False) -> bool:
    """Is a metric a time (a lower one is a speedup) or a rate per second (a
    higher one is)? Anything else gains, it does not speed up."""
    if maximize:
        return unit.endswith("/s")
    return unit in TIME_UNITS or any(word in name.lower() for word in TIME_NAMES)


def faster(baseline: Sequence[float], candidate: Sequence[float], alpha: float = SIGNIFICANCE,
           min_gain: float = MIN_GAIN) -> Verdict:
    """Is `candidate` faster than `baseline` (samples of time, interleaved)?
    One-sided Mann-Whitney U, and the gain must exceed both the measured
    spread and the floor of repeat agreement (MIN_GAIN)."""
    from scipy.stats import mannwhitneyu
    base, cand = summarize(baseline), summarize(candidate)
    p_value = float(mannwhitneyu(baseline, candidate, alternative="greater").pvalue)
    effect = base.median / cand.median if cand.median > 0 else float("inf")
    noise = max(base.spread, cand.spread, min_gain)
    return Verdict("mannwhitneyu", p_value, effect, noise, p_value < alpha and effect - 1 > noise,
                   min(len(baseline), len(candidate)))


def verdict_clear(baseline: Sequence[float], candidate: Sequence[float], most: int, least: int,
                  alpha: float = SIGNIFICANCE, min_gain: float = MIN_GAIN) -> bool:
    """A sequential confirmation (rounds of one sample a side, at most
    `most`) may stop after this round: from `least` rounds on, once the gain
    is significant at alpha split over the looks the rounds allow (so that
    looking early wins no more often than one test at the end), once the
    candidate is significantly slower, or once even a candidate faster in
    every round left could not reach significance."""
    rounds = min(len(baseline), len(candidate))
    if rounds < least:
        return False
    if rounds >= most:
        return True
    looks = most - least + 1
    if faster(baseline, candidate, alpha / looks, min_gain).significant:
        return True
    if faster(candidate, baseline, alpha / looks, min_gain).significant:
        return True
    left = most - rounds
    low, high = min(*baseline, *candidate), max(*baseline, *candidate)
    best_case = faster(list(baseline) + [high * 2 + 1] * left, list(candidate) + [low / 2] * left,
                       alpha, 0.0)
    return best_case.p_value >= alpha


def judged(samples: dict[str, list[float]], maximize: bool) -> Verdict:
    """`faster` on a metric's samples of each side ("baseline", "chosen"); to
    maximise (a rate), the sides swap (a higher rate is the faster build), so
    the effect is > 1 where the chosen is better."""
    base, chosen = samples["baseline"], samples["chosen"]
    if not base or not chosen:
        return Verdict("mannwhitneyu", 1.0, 1.0, 0.0, False, 0)
    return faster(chosen, base) if maximize else faster(base, chosen)


def judged_clear(samples: dict[str, list[float]], most: int, least: int, maximize: bool) -> bool:
    """`verdict_clear` on the samples `judged` judges (the sides swapped to maximise, as there)."""
    if maximize:
        return verdict_clear(samples["chosen"], samples["baseline"], most, least)
    return verdict_clear(samples["baseline"], samples["chosen"], most, least)


ENERGY_STEPS = 4        # counter steps an energy window spans
ENERGY_LEAST = 0.2      # seconds it spans at least


def energy_window(batch: Callable[[], int], read: Callable[[], float], clock: Callable[[], float],
                  seconds: float = 1.0, steps: int = ENERGY_STEPS,
                  least: float = ENERGY_LEAST) -> dict:
    """Energy per launch from a total-energy counter that moves in steps
    (NVML's: every 20-100 ms): `batch` runs some launches and waits for them
    (their count), `read` is the counter (mJ), `clock` the time (s). The
    window opens at one of the counter's steps and closes at the `steps`-th
    after it, once it spans `least` seconds, so neither end is a step stale
    (between two reads, each end could be); at most `seconds` in all, and
    where the counter made fewer than two steps by then, the reads' difference
    over the whole time, as before. The Answer's energy fields, by name."""
    first, started, launches = read(), clock(), 0
    seen: list[tuple[float, float, int]] = []       # (counter, time, launches) at each of its steps
    while True:
        launches += batch()
        value, now = read(), clock()
        if value != (seen[-1][0] if seen else first):
            seen.append((value, now, launches))
            if len(seen) > steps and now - seen[0][1] >= least:
                break
        if now - started >= seconds:
            break
    if len(seen) < 2:
        spent, elapsed, counted = value - first, now - started, launches
    else:
        (opened, opened_at, opened_after), (closed, closed_at, closed_after) = seen[0], seen[-1]
        spent, elapsed = closed - opened, closed_at - opened_at
        counted = closed_after - opened_after
    power = spent / 1e3 / elapsed if elapsed > 0 else 0.0
    return {"energy_mj": spent / counted, "power_w": power, "launches": counted}
