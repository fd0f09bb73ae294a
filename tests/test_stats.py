"""Timing statistics and the significance test, on synthetic samples."""
from __future__ import annotations

import numpy as np

from nvcc_evo.measure.stats import RACE_ALPHA, RACE_LOOKS, clearly_slower, faster, race_checkpoints, repetitions, summarize


def test_summary_and_spread():
    s = summarize([10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20])
    assert s.median == 15 and s.p20 == 12 and s.p80 == 18 and s.count == 11
    assert abs(s.spread - 6 / 15) < 1e-12


def test_repetitions_follow_the_kernel_length():
    assert repetitions(1e-6) == 2000          # 1 us kernels: capped
    assert repetitions(0.01) == 30            # 10 ms: 0.3 s worth
    assert repetitions(1.0) == 20             # long: at least 20


def test_a_real_gain_is_significant_and_noise_is_not():
    rng = np.random.default_rng(0)
    base = 100 * (1 + 0.005 * rng.standard_normal(30))
    better = 95 * (1 + 0.005 * rng.standard_normal(30))
    same = 100 * (1 + 0.005 * rng.standard_normal(30))
    verdict = faster(base, better)
    assert verdict.significant and verdict.p_value < 1e-6 and abs(verdict.effect - 100 / 95) < 0.01
    assert not faster(base, same).significant


def test_a_gain_inside_the_spread_is_not_accepted():
    rng = np.random.default_rng(1)
    base = 100 * (1 + 0.05 * rng.standard_normal(400))        # 5% noise
    slightly = 99 * (1 + 0.05 * rng.standard_normal(400))     # 1% faster: p small, but inside the spread
    verdict = faster(base, slightly)
    assert verdict.p_value < 0.05 and not verdict.significant


def test_a_tiny_steady_gain_is_below_the_floor():
    rng = np.random.default_rng(2)
    base = 100 * (1 + 0.0003 * rng.standard_normal(10))
    tiny = 99.87 * (1 + 0.0003 * rng.standard_normal(10))     # 0.13% faster, very steady (seen on the H200)
    verdict = faster(base, tiny)
    assert verdict.p_value < 0.001 and not verdict.significant and verdict.noise == 0.005


def test_races_look_at_doubling_counts_and_end_at_the_full_count():
    assert race_checkpoints(1000) == (10, 20, 40, 80, 160, 320, 640, 1000)
    assert race_checkpoints(25) == (10, 20, 25)
    assert race_checkpoints(5) == (5,)
    assert len(race_checkpoints(10 ** 6)) <= RACE_LOOKS


def test_a_clearly_slower_candidate_is_raced_out_and_an_equal_one_is_not():
    rng = np.random.default_rng(0)
    slower = 110 + rng.normal(0, 1, 10)
    assert clearly_slower(slower, 100.0, 0.02)                  # ten launches, all 10% slower
    assert not clearly_slower(slower[:9], 100.0, 0.02)          # too few to say
    assert not clearly_slower(101 + rng.normal(0, 1, 500), 100.0, 0.02)   # inside the margin
    assert not clearly_slower(100 + rng.normal(0, 1, 2000), 100.0, 0.02)  # the full count: 2**2000 is no float
    assert clearly_slower(120 + rng.normal(0, 1, 2000), 100.0, 0.02)


def test_racing_rarely_stops_a_candidate_as_fast_as_the_incumbent():
    rng = np.random.default_rng(1)
    stopped = 0
    for _ in range(2000):
        samples = 100 * (1 + rng.normal(0, 0.05, 640))           # noisy, as fast as the incumbent
        stopped += any(clearly_slower(samples[:n], 100.0, 0.0) for n in race_checkpoints(640))
    assert stopped / 2000 <= RACE_LOOKS * RACE_ALPHA


def test_adaptive_repeats_stop_when_settled_or_clearly_worse():
    from nvcc_evo.measure.stats import enough
    assert not enough([10.0], least=2, most=5)                       # fewer than asked for
    assert enough([10.0, 10.01], least=2, most=5)                    # settled: spread 0.06%
    assert not enough([10.0, 12.0], least=2, most=5)                 # noisy, nothing to compare with
    assert enough([10.0, 12.0, 11.0, 9.0, 13.0], least=2, most=5)    # the most
    best = summarize([5.0, 5.1, 4.9])
    assert enough([10.0, 12.0], least=2, most=5, best=best)          # clearly worse than the best
    assert not enough([4.9, 5.6], least=2, most=5, best=best)        # could still be the best
    assert enough([2.0, 2.4], least=2, most=5, best=best, maximize=True)   # a rate well below the best's


def test_a_verdict_counts_its_rounds():
    assert faster([10, 11, 12, 10, 11], [5, 5, 6, 5, 6]).rounds == 5


def test_timing_settles_once_the_median_is_known_well_enough():
    from nvcc_evo.measure.stats import SETTLE_LEAST, SETTLE_PRECISION, median_interval, settled
    rng = np.random.default_rng(3)
    steady = list(70 * (1 + rng.normal(0, 0.003, 640)))          # 0.3% launch-to-launch, a 70 us kernel
    assert not settled(steady[:SETTLE_LEAST - 1])                # too few launches
    assert settled(steady[:320]) and settled(steady[:SETTLE_LEAST] * 4)
    assert not settled([5.0] * 200)                              # steady but only 1 ms of launches
    noisy = list(70 * (1 + rng.normal(0, 0.05, 640)))            # 5%: the median is not known to 0.25%
    assert not settled(noisy[:320])
    low, high = median_interval(noisy)
    assert low < np.median(noisy) < high and (high - low) / 2 > SETTLE_PRECISION * np.median(noisy)


def test_a_settled_median_is_within_the_precision_of_the_full_count_nearly_always():
    from nvcc_evo.measure.stats import SETTLE_PRECISION, settled
    rng = np.random.default_rng(4)
    off = 0
    for _ in range(200):
        samples = 70 * (1 + rng.normal(0, 0.01, 2000)) + rng.exponential(0.5, 2000)   # a tail, as launches have
        stop = next((n for n in race_checkpoints(2000) if settled(samples[:n])), 2000)
        off += abs(np.median(samples[:stop]) / np.median(samples) - 1) > 2 * SETTLE_PRECISION
    assert off / 200 < 0.02
