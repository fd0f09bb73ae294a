"""nvcc-evo's engine against Kernel Tuner's strategies on brute-forced
auto-tuning spaces, scored by the auto-tuning methodology (Willemsen et al.,
FGCS 2024): 0 is random search, 1 the space's optimum from the start, over
the time budget the methodology gives each space. No GPU: every strategy is
replayed on the recorded answers (Kernel Tuner in its simulation mode) and
spends the same simulated time (benchmarks/autotune_runs.py).

It reads every Kernel Tuner cache (`*.json.gz`) below the hub folder: the
benchmark hub's spaces, or any others of that format. It prints a table per
space, the mean scores of the spaces the engine's defaults were tuned on
(`TUNED_ON`) and of the others apart, and last one line:
`score: nvcc-evo X, best Kernel Tuner strategy NAME Y` over the spaces held
out (all of them when the hub has none of TUNED_ON).

With `--loko`, the engine's settings are chosen by leave-one-kernel-out:
every setting of `CHOICES` runs on every space; for each kernel (the
space's folder), the setting with the best mean score on the other
kernels' spaces is the one its spaces are scored with (said per kernel),
so no space is scored with settings chosen on it; every space is held out.

    pip install -e ".[methodology]"
    python benchmarks/methodology.py --hub DIR [--quick] [--repeats N] [--jobs N] [--loko] [--store FILE]
    NVCC_EVO_BENCHMARK_HUB=DIR python benchmarks/methodology.py --quick
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import asdict, dataclass, replace
from multiprocessing import get_context
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import autotune_hub  # noqa: E402
import autotune_runs  # noqa: E402
import autotune_score  # noqa: E402
from autotune_runs import NVCC_EVO, EngineSettings  # noqa: E402
from nvcc_evo.engine.bayes import Bayes  # noqa: E402
from nvcc_evo.engine.surrogate import Guide  # noqa: E402

HUB_VARIABLE = "NVCC_EVO_BENCHMARK_HUB"
# Every strategy of Kernel Tuner 1.5 that runs in its simulation mode. Left out: pyatf_strategies
# (with pyATF 0.0.13, the released one, it fails before its first evaluation: TypeError in pyatf.TP)
# and skopt (scikit-optimize 0.10.2, not a dependency here: its default random forest costs about
# 1.6 CPU s per evaluation, 75 s for 47 on convolution_milo/MI250X, hours for a budget of 1000;
# `--strategies skopt` runs it where installed).
STRATEGIES = ("adaptive_tabu_greywolf", "basinhopping", "bayes_opt", autotune_runs.KERNEL_TUNER_DEFAULT, "diff_evo",
              "dual_annealing", "firefly_algorithm", "genetic_algorithm", "greedy_ils", "greedy_mls", "hybrid_vndx",
              "minimize", "mls", "nsga2", "nsga3", "ordered_greedy_mls", "pso", "random_sample", "simulated_annealing")
# The spaces the engine's defaults were chosen on (one or two GPUs of each kernel of
# the benchmark hub); every other space is held out, and its score said apart.
TUNED_ON = frozenset({
    "kt_pnpoly/RTX_2080_Ti", "kt_gemm/RTX_2080_Ti", "convolution_milo/A100", "convolution_milo/A4000",
    "dedispersion_milo/A100", "dedispersion_milo/A4000",
})
REPEATS, QUICK_REPEATS = 25, 10        # five runs are too few to rank strategies (their scores swap)
# The engine's settings --loko chooses among, per kernel left out: the engine's defaults (the operators, a first
# generation at random) or a population of 8 (smaller generations: the best found is exploited sooner), the one
# setting of those tried in issue 40's second session whose mean over the hub was not below the defaults' on
# seeds 100-119 (BENCHMARKS.md). The first generation drawn far apart (engine.space.spread) and the surrogate's
# settings (engine.surrogate.Guide) lost leave-one-kernel-out before (`--guided` runs the guide). `bayes`: a
# Gaussian process proposes half (`bayes-75`: three quarters) of each batch by Expected Improvement
# (engine.bayes; issue 40, seeds 100-119: 0.706 and 0.720 over the hub against the defaults' 0.578).
CHOICES = {
    "defaults": EngineSettings(),
    "population-8": EngineSettings(population=8),
    "bayes": EngineSettings(bayes=Bayes()),
    "bayes-75": EngineSettings(bayes=Bayes(share=0.75)),
}
DETERMINISTIC = {"brute_force"}          # one run says it all


@dataclass(frozen=True)
class Row:
    strategy: str
    score: float
    best: float             # median over runs of the best found, over the space's optimum
    evaluations: float      # mean configurations evaluated within the budget
    runs: int
    seconds: float          # wall time of its runs here


@dataclass(frozen=True)
class SpaceResult:
    name: str
    configurations: int
    budget_fevals: int
    budget_seconds: float
    rows: tuple[Row, ...]
    cpu_seconds: float      # of the process that replayed it

    def score(self, strategy: str) -> float:
        return next(r.score for r in self.rows if r.strategy == strategy)

    def lacks(self, strategies) -> list[str]:
        return [s for s in strategies if all(r.strategy != s for r in self.rows)]


@dataclass(frozen=True)
class Plan:
    strategies: tuple[str, ...]
    repeats: int
    seed: int
    settings: tuple[tuple[str, EngineSettings], ...]     # (row name, the engine's settings) each run
    store: Path | None = None       # Kernel Tuner's rows kept (`Store`)
    stored_only: bool = False       # a Kernel Tuner row not in the store is left out, not replayed
    unordered: tuple[str, ...] = ()  # parameters the engine is told name choices (as an ACF's
                                     # `unordered`): what a user who knows the kernel would say


class Store:
    """Kernel Tuner's rows kept in a JSON-lines file, by space, strategy,
    seeds, budget and Kernel Tuner's version: its runs spend simulated time
    alone (autotune_runs.simulated_budget), so a row is the same wherever
    it ran, and a later run of the benchmark (the engine changed) reads it
    back instead of replaying Kernel Tuner again."""

    def __init__(self, path: Path | None) -> None:
        self.path = path

    @staticmethod
    def key(space: str, strategy: str, seeds: list[int], budget: float) -> str:
        from importlib.metadata import version
        return json.dumps([space, strategy, seeds, round(budget, 3), version("kernel_tuner")])

    def read(self, key: str) -> Row | None:
        if self.path is None or not self.path.is_file():
            return None
        for line in self.path.read_text().splitlines():
            record = json.loads(line)
            if record["key"] == key:
                return Row(**record["row"])
        return None

    def write(self, key: str, row: Row) -> None:
        if self.path is not None:
            with open(self.path, "a") as handle:         # one short line a write: processes append whole lines
                handle.write(json.dumps({"key": key, "row": asdict(row)}) + "\n")


def _row(strategy: str, runs, hub_space, started: float) -> Row:
    optimum = float(hub_space.values.min())
    bests = [float(r.values.min()) if len(r.values) else np.inf for r in runs]
    return Row(strategy, autotune_score.score(runs, hub_space.values, hub_space.costs),
               float(np.median(bests)) / optimum, float(np.mean([len(r.times) for r in runs])),
               len(runs), time.monotonic() - started)


def evaluate_space(job: tuple[Path, Path, Plan]) -> SpaceResult:
    """Every strategy's runs on one space, and their scores."""
    path, hub, plan = job
    cpu = time.process_time()
    space = autotune_hub.load(path, hub, frozenset(plan.unordered))
    budget = autotune_score.time_range(space.values, space.costs).end
    seeds = [plan.seed + i for i in range(plan.repeats)]
    started = time.monotonic()
    rows = []
    for name, settings in plan.settings:
        rows.append(_row(name, [autotune_runs.run_engine(space, budget, s, settings) for s in seeds], space, started))
        started = time.monotonic()
    store = Store(plan.store)
    with autotune_runs.plain_cache(space) as cache:
        for strategy in plan.strategies:
            started = time.monotonic()
            chosen = seeds[:1] if strategy in DETERMINISTIC else seeds
            key = store.key(space.name, strategy, chosen, budget)
            row = store.read(key)
            if row is None and plan.stored_only:
                continue
            if row is None:
                row = _row(strategy, [autotune_runs.run_kernel_tuner(cache, strategy, budget, s) for s in chosen],
                           space, started)
                store.write(key, row)
            rows.append(row)
    fevals = autotune_score.fevals_to_reach(space.values, autotune_score.END)
    return SpaceResult(space.name, len(space.answers), fevals, budget / 1000, tuple(rows), time.process_time() - cpu)


def kernel_of(result: SpaceResult) -> str:
    return result.name.split("/")[0]


def left_one_kernel_out(results: list[SpaceResult]) -> tuple[list[SpaceResult], dict[str, str]]:
    """Each space with the row of the settings chosen without its kernel named nvcc-evo, and the choice
    per kernel: the best mean score over the other kernels' spaces."""
    chosen = {}
    for kernel in sorted({kernel_of(r) for r in results}):
        others = [r for r in results if kernel_of(r) != kernel] or results
        chosen[kernel] = max(CHOICES, key=lambda c: np.mean([r.score(f"{NVCC_EVO}[{c}]") for r in others]))
    scored = []
    for r in results:
        row = next(row for row in r.rows if row.strategy == f"{NVCC_EVO}[{chosen[kernel_of(r)]}]")
        rows = tuple(x for x in r.rows if not x.strategy.startswith(NVCC_EVO)) + (replace(row, strategy=NVCC_EVO),)
        scored.append(replace(r, rows=rows))
    return scored, chosen


def table(result: SpaceResult, loko: bool = False) -> str:
    held = "held out" if loko or result.name not in TUNED_ON else "tuned on"
    lines = [f"{result.name} ({held}): {result.configurations} configurations, budget {result.budget_seconds:.0f} s "
             f"simulated (random search's {result.budget_fevals} evaluations to 95%)",
             f"  {'strategy':<24} {'score':>7} {'best/optimum':>13} {'evaluations':>12} {'runs':>5} {'wall s':>7}"]
    for r in sorted(result.rows, key=lambda r: -r.score):
        lines.append(f"  {r.strategy:<24} {r.score:>7.3f} {r.best:>13.4f} {r.evaluations:>12.0f} {r.runs:>5} "
                     f"{r.seconds:>7.1f}")
    return "\n".join(lines)


def mean_scores(results: list[SpaceResult], strategies) -> dict[str, float]:
    return {s: float(np.mean([r.score(s) for r in results])) for s in strategies}


def summary(label: str, results: list[SpaceResult], strategies) -> str:
    scores = mean_scores(results, strategies)
    shown = ", ".join(f"{s} {v:.3f}" for s, v in sorted(scores.items(), key=lambda kv: -kv[1]))
    return f"mean over {len(results)} spaces {label}: {shown}"


def ahead_line(results: list[SpaceResult], strategies) -> str:
    others = [s for s in strategies if s != NVCC_EVO]
    ahead = [r.name for r in results if all(r.score(NVCC_EVO) > r.score(s) for s in others)]
    return f"nvcc-evo ahead of every Kernel Tuner strategy on {len(ahead)} of {len(results)} spaces"


def score_line(results: list[SpaceResult], strategies) -> str:
    scores = mean_scores(results, strategies)
    others = [s for s in strategies if s != NVCC_EVO]
    if not others:
        return f"score: nvcc-evo {scores[NVCC_EVO]:.3f} (no Kernel Tuner strategy run)"
    best = max(others, key=lambda s: scores[s])
    return f"score: nvcc-evo {scores[NVCC_EVO]:.3f}, best Kernel Tuner strategy {best} {scores[best]:.3f}"


def hub_folder(given: str | None) -> Path:
    folder = given or os.environ.get(HUB_VARIABLE)
    if not folder:
        raise SystemExit(f"methodology: name the benchmark hub's folder: --hub DIR or {HUB_VARIABLE}=DIR")
    if not Path(folder).is_dir():
        raise SystemExit(f"methodology: {folder} is not a folder")
    return Path(folder).resolve()


def parse(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--hub", help=f"the folder of Kernel Tuner caches (default: ${HUB_VARIABLE})")
    p.add_argument("--quick", action="store_true",
                   help=f"the held-out spaces only, {QUICK_REPEATS} runs per strategy (else all, {REPEATS} runs)")
    p.add_argument("--repeats", type=int, help="runs per strategy and space")
    p.add_argument("--only", nargs="*", default=(), help="spaces to run (names relative to the hub, e.g. kt_gemm/RTX_3090)")
    p.add_argument("--spaces", choices=("all", "tuned", "held-out"), default="all",
                   help="the spaces TUNED_ON, the others, or all (default)")
    p.add_argument("--strategies", nargs="*", default=STRATEGIES, help="Kernel Tuner strategies")
    p.add_argument("--jobs", type=int, default=2, help="spaces replayed at once (processes)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--population", type=int, help="the engine's population (default: the engine's)")
    p.add_argument("--local-share", type=float, help="the engine's share of local steps (default: the engine's)")
    p.add_argument("--loko", action="store_true",
                   help="choose the engine's settings among CHOICES by leave-one-kernel-out (every space held out)")
    p.add_argument("--guided", action="store_true", help="the engine with its surrogate (engine.surrogate.Guide())")
    p.add_argument("--operators", action="store_true",
                   help="the engine's operators alone (default: with its Gaussian process, as a retune searches)")
    p.add_argument("--store", type=Path, help="a JSON-lines file that keeps Kernel Tuner's rows: read back where "
                                              "the space, strategy, seeds and budget are the same")
    p.add_argument("--stored-only", action="store_true",
                   help="Kernel Tuner's rows from --store alone (none replayed); a space without every strategy's "
                        "row is left out of the means, said")
    p.add_argument("--unordered", nargs="*", default=(),
                   help="parameters whose numbers name choices, declared to the engine as an ACF's `unordered` "
                        "does (the hub's spaces say nothing of it: a user's knowledge, not nvcc-evo's score)")
    return p.parse_args(argv)


def _chosen(name: str, args: argparse.Namespace) -> bool:
    if args.only and name not in args.only:
        return False
    if args.loko:
        return True
    spaces = "held-out" if args.quick and args.spaces == "all" else args.spaces
    return spaces == "all" or (name in TUNED_ON) == (spaces == "tuned")


def engine_settings(args: argparse.Namespace) -> tuple[tuple[str, EngineSettings], ...]:
    """The engine's rows: with --loko one per setting of CHOICES, each keeping its own population and local
    share unless the command line gives one; else the engine as the command line says (a retune's default
    search, the Gaussian process beside the operators, unless --operators or --guided)."""
    if not args.loko:
        bayes = None if args.operators or args.guided else Bayes()
        return ((NVCC_EVO, EngineSettings(args.population, args.local_share, Guide() if args.guided else None,
                                          bayes=bayes)),)
    given = {k: v for k, v in (("population", args.population), ("local_share", args.local_share)) if v is not None}
    return tuple((f"{NVCC_EVO}[{name}]", replace(choice, **given)) for name, choice in CHOICES.items())


def run(args: argparse.Namespace) -> list[SpaceResult]:
    hub = hub_folder(args.hub)
    paths = [p for p in autotune_hub.find(hub) if _chosen(str(p.relative_to(hub)).removesuffix(".json.gz"), args)]
    repeats = args.repeats or (QUICK_REPEATS if args.quick else REPEATS)
    plan = Plan(tuple(args.strategies), repeats, args.seed, engine_settings(args), args.store and args.store.resolve(),
                args.stored_only, tuple(args.unordered))
    named = {name: i for i, name in enumerate(args.only)}

    def order(path: Path) -> int:
        """As --only names them (a run that may not end: the first named finish first), else the largest first."""
        return named[str(path.relative_to(hub)).removesuffix(".json.gz")] if named else -path.stat().st_size
    jobs = [(path, hub, plan) for path in sorted(paths, key=order)]
    results = []
    with get_context("spawn").Pool(max(1, min(args.jobs, len(jobs)))) as pool:
        for result in pool.imap_unordered(evaluate_space, jobs):     # each table as its space ends
            print(table(result, args.loko), flush=True)
            results.append(result)
    return sorted(results, key=lambda r: r.name)


def main(argv=None) -> int:
    args = parse(argv)
    started = time.monotonic()
    results = run(args)
    strategies = (NVCC_EVO, *args.strategies)
    if args.loko:
        results, chosen = left_one_kernel_out(results)
        for kernel, choice in chosen.items():
            print(f"{kernel}: scored with {choice}, the best on the other kernels' spaces")
        for result in results:
            print(table(result, True))
    cpu = sum(r.cpu_seconds for r in results)
    for result in results:
        if result.lacks(strategies):
            print(f"{result.name}: left out of the means, no row of {', '.join(result.lacks(strategies))}")
    results = [r for r in results if not r.lacks(strategies)]
    tuned = [r for r in results if r.name in TUNED_ON and not args.loko]
    held = [r for r in results if r.name not in TUNED_ON or args.loko]
    for label, group in (("the defaults were tuned on", tuned), ("held out", held)):
        if group:
            print(summary(label, group, strategies))
    if args.loko:       # the operators' own settings (population, local share) were chosen on TUNED_ON
        held = [r for r in results if r.name not in TUNED_ON] or results
        print(summary("held out, and outside TUNED_ON too", held, strategies))
    print(f"({time.monotonic() - started:.0f} s wall, {cpu:.0f} s CPU in the replaying processes)")
    print(ahead_line(held or results, strategies))
    print(score_line(held or results, strategies))
    return 0


if __name__ == "__main__":
    sys.exit(main())
