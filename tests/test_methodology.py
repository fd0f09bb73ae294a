"""benchmarks/methodology.py: the auto-tuning methodology's score, the
replay of brute-forced Kernel Tuner caches, and a small slice of the
benchmark itself (two spaces, few runs; no GPU)."""
from __future__ import annotations

import gzip
import json
import math
import os
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import ROOT

sys.path.insert(0, str(ROOT / "benchmarks"))
import autotune_hub  # noqa: E402
import autotune_score  # noqa: E402
from autotune_score import Trajectory  # noqa: E402

# The benchmark hub's spaces: where the environment says, else the shared fixtures beside the clone.
HUB = Path(os.environ.get("NVCC_EVO_BENCHMARK_HUB") or ROOT.parent / "shared" / "fixtures" / "benchmark_hub")
needs_hub = pytest.mark.skipif(not HUB.is_dir(), reason=f"no benchmark hub at {HUB} (NVCC_EVO_BENCHMARK_HUB)")
SMALL = "kt_pnpoly/RTX_3090"                 # 3774 configurations, a budget of about 200 evaluations


def _random_runs(values: np.ndarray, costs: np.ndarray, count: int, seed: int = 0) -> list[Trajectory]:
    """Random search without replacement, `count` times."""
    rng = np.random.default_rng(seed)
    runs = []
    for _ in range(count):
        order = rng.permutation(len(values))
        runs.append(Trajectory(np.cumsum(costs[order]), values[order]))
    return runs


def test_fevals_to_reach_is_the_papers_expected_draws():
    values = np.arange(1.0, 100.0)           # 1..99: optimum 1, median 50
    # 95% of the way: a value <= 1 + 49 * 0.05 = 3.45, the 97th worst (index 96): ceil(96 / (100 - 96)) draws
    assert autotune_score.fevals_to_reach(values, 0.95) == 24
    # 1%: <= 49.51, index 50 of the worst-first order: ceil(50 / 50)
    assert autotune_score.fevals_to_reach(values, 0.01) == 1


def test_time_range_is_draws_times_the_median_cost():
    values, costs = np.arange(1.0, 100.0), np.full(99, 2000.0)
    budget = autotune_score.time_range(values, costs)
    assert (budget.start, budget.end) == (2000.0, 48000.0)


def test_random_search_scores_about_zero_and_the_optimum_one():
    rng = np.random.default_rng(7)
    values, costs = rng.uniform(1.0, 2.0, 2000), rng.uniform(500.0, 1500.0, 2000)
    assert abs(autotune_score.score(_random_runs(values, costs, 300), values, costs)) < 0.03
    # A skewed space whose budget ends near the optimum: the package's expected rank of the best
    # of M draws, round(M (N + 1) / (M + 1)) from the worst, is one rank better than random
    # search's own, so random search itself scores a little below 0 there.
    values = rng.lognormal(0.0, 0.5, 2000)
    assert -0.15 < autotune_score.score(_random_runs(values, costs, 300), values, costs) < 0.0
    at_once = Trajectory(np.array([1.0]), np.array([values.min()]))     # the optimum before the budget starts
    assert autotune_score.score([at_once], values, costs) == pytest.approx(1.0)
    worst = Trajectory(np.array([1.0]), np.array([values.max()]))       # never better than the worst
    assert autotune_score.score([worst], values, costs) < -1.0


def test_budget_and_random_baseline_are_the_packages():
    """The time range and random search's curve are those of the
    autotuning-methodology package, on a skewed space and with costs that vary."""
    package = pytest.importorskip("autotuning_methodology.searchspace_statistics",
                                  reason="the package: pip install -e '.[methodology]'")
    from autotuning_methodology.baseline import RandomSearchCalculatedBaseline
    rng = np.random.default_rng(11)
    values, costs = rng.lognormal(0.0, 0.5, 3000), rng.uniform(200.0, 3000.0, 3000)
    stats = _package_statistics(package.SearchspaceStatistics, values, costs)
    start, end = package.SearchspaceStatistics.cutoff_point_fevals_time_start_end(stats, 0.01, 0.95)[2:]
    ours = autotune_score.time_range(values, costs)
    assert (ours.start, ours.end) == pytest.approx((start, end))
    times = ours.grid()
    theirs = RandomSearchCalculatedBaseline(stats).get_curve_over_time(times)
    assert np.allclose(autotune_score.random_curve(values, costs, times), theirs)


def _package_statistics(cls, values: np.ndarray, costs: np.ndarray):
    """What the package's statistics read of a space, for values and costs
    given here (its own loader wants files of its format); its methods bound."""
    stats = object.__new__(cls)
    stats.minimization, stats.size = True, len(values)
    stats.objective_performances_total = values
    stats.objective_performances_total_sorted = stats.objective_performances_total_sorted_nan = np.sort(values)
    stats.objective_times_total = costs
    stats.objective_times_total_sorted = np.sort(costs)
    stats.objective_times_array = costs[None, :]
    stats.objective_performances_array = values[None, :]
    return stats


def test_a_curve_is_the_mean_rank_of_its_runs_best_so_far():
    values = np.array([1.0, 3.0, 5.0, 7.0, 9.0])                 # ranks 0..4
    runs = [Trajectory(np.array([1.0, 2.0, 3.0]), np.array([5.0, 7.0, 1.0])),
            Trajectory(np.array([2.5, 2.8]), np.array([9.0, 3.0]))]
    got = autotune_score.curve(runs, np.array([0.5, 1.0, 2.0, 2.6, 2.9, 3.0]), values)
    # before its first answer a run counts that answer (ranks 2 and 4); then (2, 1) and (0, 1):
    # means 3, 3, 3, 3, 1.5 -> 2, 0.5 -> 0
    assert got.tolist() == [7.0, 7.0, 7.0, 7.0, 5.0, 1.0]


@needs_hub
def test_the_replay_answers_the_caches_values_and_keeps_its_errors_out():
    path = HUB / f"{SMALL}.json.gz"
    with gzip.open(path, "rt") as handle:
        cache = json.load(handle)
    space = autotune_hub.load(path, HUB)
    assert space.name == SMALL and space.names == tuple(cache["tune_params_keys"])
    failed = ok = 0
    for record in list(cache["cache"].values())[::7]:
        genome = space.space.genome({n: record[n] for n in space.names})
        if isinstance(record["time"], str):           # RuntimeFailedConfig: outside the space
            assert not space.space.allows(genome)
            failed += 1
            continue
        answer = space.answer(genome)
        assert answer.value == record["time"]
        assert answer.cost == pytest.approx(record["compile_time"] + record["verification_time"]
                                            + record["benchmark_time"])
        ok += 1
    assert failed and ok
    assert space.space.size == len(space.answers) < math.prod(map(len, space.choices))


@needs_hub
def test_the_engine_spends_the_budget_on_allowed_configurations_only():
    import autotune_runs
    space = autotune_hub.load(HUB / f"{SMALL}.json.gz", HUB)
    budget = autotune_score.time_range(space.values, space.costs).end
    run = autotune_runs.run_engine(space, budget, seed=3)
    assert run.times[-2] < budget <= run.times[-1]            # stopped at the budget, not before
    assert set(run.values) <= set(space.values)
    assert run.values.min() < np.median(space.values)
    again = autotune_runs.run_engine(space, budget, seed=3)
    assert np.array_equal(run.values, again.values)          # the seed reproduces the run


@needs_hub
def test_kernel_tuner_replays_the_cache_within_the_same_budget():
    pytest.importorskip("kernel_tuner", reason="Kernel Tuner: pip install -e '.[methodology]'")
    import autotune_runs
    space = autotune_hub.load(HUB / f"{SMALL}.json.gz", HUB)
    budget = autotune_score.time_range(space.values, space.costs).end
    with autotune_runs.plain_cache(space) as cache:
        run = autotune_runs.run_kernel_tuner(cache, "random_sample", budget, seed=5)
        assert cache.is_file()
    assert not cache.exists()
    assert run.times[-1] <= budget and set(run.values) <= set(space.values)
    # charged as the simulation charges: about the budget over the mean cost of a configuration
    assert len(run.times) == pytest.approx(budget / space.costs.mean(), rel=0.25)
    assert len(set(run.values)) > 0.9 * len(run.values)      # samples without replacement


@needs_hub
def test_kernel_tuner_spends_simulated_time_alone_whatever_the_machines_load(monkeypatch):
    """A run of Kernel Tuner is the same on a loaded machine: its budget counts the simulated time
    alone. (Its own budget added its wall time, so on a machine loaded 12 on 2 cores genetic_algorithm
    scored 0.164 where it had scored 0.616.)"""
    pytest.importorskip("kernel_tuner", reason="Kernel Tuner: pip install -e '.[methodology]'")
    import itertools
    import time

    import autotune_runs
    space = autotune_hub.load(HUB / f"{SMALL}.json.gz", HUB)
    budget = autotune_score.time_range(space.values, space.costs).end
    with autotune_runs.plain_cache(space) as cache:
        quiet = autotune_runs.run_kernel_tuner(cache, "genetic_algorithm", budget, seed=2)
        ticks, clock = itertools.count(), time.perf_counter_ns
        # A loaded machine, exaggerated: each look at the clock finds it a second later.
        monkeypatch.setattr(time, "perf_counter_ns", lambda: clock() + next(ticks) * 10**9)
        loaded = autotune_runs.run_kernel_tuner(cache, "genetic_algorithm", budget, seed=2)
    assert quiet.times[-1] > 0.9 * budget
    assert np.array_equal(loaded.times, quiet.times) and np.array_equal(loaded.values, quiet.values)


@needs_hub
def test_kernel_tuners_rows_are_kept_and_read_back(tmp_path, monkeypatch):
    """--store: a row of Kernel Tuner is replayed once; the next run with the same space, strategy,
    seeds and budget reads it back."""
    pytest.importorskip("kernel_tuner", reason="Kernel Tuner: pip install -e '.[methodology]'")
    import autotune_runs
    import methodology
    plan = methodology.Plan(("random_sample",), 2, 0, (), tmp_path / "kt.jsonl")
    first = methodology.evaluate_space((HUB / f"{SMALL}.json.gz", HUB, plan))

    def replayed(*args):
        raise AssertionError("replayed again")
    monkeypatch.setattr(autotune_runs, "run_kernel_tuner", replayed)
    again = methodology.evaluate_space((HUB / f"{SMALL}.json.gz", HUB, plan))
    assert again.rows == first.rows and len((tmp_path / "kt.jsonl").read_text().splitlines()) == 1
    with pytest.raises(AssertionError, match="replayed again"):     # other seeds: replayed
        methodology.evaluate_space((HUB / f"{SMALL}.json.gz", HUB, methodology.Plan(
            ("random_sample",), 2, 5, (), tmp_path / "kt.jsonl")))
    unstored = methodology.evaluate_space((HUB / f"{SMALL}.json.gz", HUB, methodology.Plan(   # --stored-only
        ("random_sample",), 2, 5, (), tmp_path / "kt.jsonl", stored_only=True)))
    assert unstored.lacks(["random_sample"]) == ["random_sample"] and first.lacks(["random_sample"]) == []


@needs_hub
def test_slice_of_the_benchmark_scores_kernel_tuner_and_nvcc_evo(capsys):
    pytest.importorskip("kernel_tuner", reason="Kernel Tuner: pip install -e '.[methodology]'")
    import methodology
    code = methodology.main(["--hub", str(HUB), "--only", SMALL, "convolution_milo/W6600", "--repeats", "3",
                             "--strategies", "random_sample", "genetic_algorithm", "--jobs", "1"])
    out = capsys.readouterr().out
    assert code == 0
    assert f"{SMALL} (held out)" in out and "convolution_milo/W6600 (held out)" in out
    lines = out.strip().splitlines()
    assert lines[-1].startswith("score: nvcc-evo ") and ", best Kernel Tuner strategy " in lines[-1]
    for strategy in ("nvcc-evo", "random_sample", "genetic_algorithm"):
        assert sum(line.split()[0] == strategy for line in lines if line.startswith("  ")) == 2


def test_leave_one_kernel_out_scores_no_space_with_settings_chosen_on_it():
    """Each kernel's spaces are scored with the setting best on the other kernels' spaces: a setting that
    wins only on the kernel itself is never the one its spaces are scored with."""
    import methodology
    names = list(methodology.CHOICES)
    mine, other = names[0], names[1]

    def space(name: str, scores: dict) -> "methodology.SpaceResult":
        rows = tuple(methodology.Row(f"nvcc-evo[{c}]", scores.get(c, 0.0), 1.0, 10, 10, 0.0) for c in names)
        return methodology.SpaceResult(name, 100, 10, 1.0, rows + (methodology.Row("genetic_algorithm", 0.5, 1.0,
                                                                                       10, 10, 0.0),), 0.0)

    results = [space("a/1", {mine: 0.9, other: 0.1}), space("a/2", {mine: 0.8, other: 0.2}),
               space("b/1", {mine: 0.1, other: 0.7}), space("c/1", {mine: 0.2, other: 0.6})]
    scored, chosen = methodology.left_one_kernel_out(results)
    assert chosen == {"a": other, "b": mine, "c": mine}          # b, c: a's two spaces outweigh the third's
    assert [r.score("nvcc-evo") for r in scored] == [0.1, 0.2, 0.1, 0.2]
    assert all(r.score("genetic_algorithm") == 0.5 for r in scored)
    assert all(sum(row.strategy.startswith("nvcc-evo") for row in r.rows) == 1 for r in scored)


def test_leave_one_kernel_out_runs_each_setting_as_chosen_unless_the_command_line_says_otherwise():
    """--loko: each setting of CHOICES keeps its own population (a choice of population 8 runs with 8);
    --population overrides it for every setting."""
    import methodology
    own = dict(methodology.engine_settings(methodology.parse(["--loko"])))
    assert {name.removeprefix("nvcc-evo[").removesuffix("]"): s for name, s in own.items()} == methodology.CHOICES
    assert any(s.population == 8 for s in own.values())
    given = methodology.engine_settings(methodology.parse(["--loko", "--population", "16"]))
    assert len(given) == len(methodology.CHOICES) and all(s.population == 16 for _, s in given)


@needs_hub
def test_the_engine_row_is_a_retune_s_search_and_told_unordered_parameters_as_an_acf_says():
    """Without --loko the nvcc-evo row is a retune's default search (the Gaussian process beside the
    operators; --operators: the operators alone), and --unordered declares hub parameters as an
    ACF's `unordered` does: the space's dimension says so, the model reads it as categories."""
    import methodology
    from nvcc_evo.engine.bayes import Encoding
    ((_, default),) = methodology.engine_settings(methodology.parse([]))
    ((_, operators),) = methodology.engine_settings(methodology.parse(["--operators"]))
    assert default.bayes is not None and operators.bayes is None
    args = methodology.parse(["--unordered", "between_method", "use_method"])
    told = autotune_hub.load(HUB / f"{SMALL}.json.gz", HUB, frozenset(args.unordered)).space
    plain = autotune_hub.load(HUB / f"{SMALL}.json.gz", HUB).space
    assert {d.knob for d in told.dimensions if d.unordered} == {"between_method", "use_method"}
    assert not any(d.unordered for d in plain.dimensions)
    assert Encoding(told).width == Encoding(plain).width + 4 + 3 - 2
