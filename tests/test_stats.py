"""Timing statistics and the significance test, on synthetic samples."""
from __future__ import annotations

import numpy as np

from nvcc_evo.measure.stats import faster, repetitions, summarize


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
