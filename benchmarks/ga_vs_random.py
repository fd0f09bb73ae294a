"""GA (NSGA-II) against random search at equal evaluation budgets, on a
recorded space (tests/data/recorded/spill_space.jsonl, replayed: no compiler
needed). Prints, per budget, the median over seeds of the best point found
(fewest spill bytes, then fewest instructions) and how often each wins.

    .venv/bin/python benchmarks/ga_vs_random.py [--seeds 11] [--budgets 15 25 40]
"""
from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import numpy as np

from nvcc_evo.evolve import Budget, Engine, Evaluation, random_search, run_search
from nvcc_evo.measure.replay import Replay
from nvcc_evo.space import Dimension, SearchSpace

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
RECORDING = ROOT / "tests" / "data" / "recorded" / "spill_space.jsonl"


def recorded(path: Path = RECORDING) -> tuple[SearchSpace, Replay]:
    """The space is every genome in the recording, dimension by dimension."""
    replay = Replay.from_file(path)
    genomes = list(replay.answers)
    knobs = [k for k, _ in genomes[0].items]
    dims = []
    for i, knob in enumerate(knobs):
        values = list(dict.fromkeys(g.items[i][1] for g in genomes))
        baseline = genomes[0].items[i][1]
        dims.append(Dimension(knob, tuple(sorted(values, key=lambda v: (v is not None, v))), baseline))
    return SearchSpace(tuple(dims)), replay


def score(evaluations) -> float:
    feasible = [e.objectives[0] for e in evaluations if e.feasible]
    return min(feasible) if feasible else float("inf")


def _evaluator(replay: Replay):
    """One objective: spill bytes, then instructions (lexicographic as a number)."""
    def evaluate(genomes):
        out = []
        for genome in genomes:
            measurement, _ = replay.measure(genome)
            value = measurement.get("spills") * 100_000 + measurement.get("instructions") if measurement.ok \
                else float("inf")
            out.append(Evaluation(genome, (value,), status=measurement.status))
        return out
    return evaluate


def ga_best(space, replay, budget: int, seed: int) -> float:
    engine = Engine(space, np.random.default_rng(seed), population=8, seeds=[space.baseline()])
    run_search(engine, _evaluator(replay), Budget(evaluations=budget, patience=10**6))
    return score(engine.seen.values())


def random_best(space, replay, budget: int, seed: int) -> float:
    return score(random_search(space, _evaluator(replay), budget, np.random.default_rng(seed)))


def best_so_far(evaluations) -> list[float]:
    """Best score after each evaluation, in the order they were made."""
    best, trace = float("inf"), []
    for evaluation in evaluations:
        if evaluation.feasible:
            best = min(best, evaluation.objectives[0])
        trace.append(best)
    return trace


def traces(budget: int, seeds: int, optimum: float) -> dict[str, list[tuple[float, float]]]:
    """Share of seeds that have found the optimum after each evaluation, GA and random search."""
    space, replay = recorded()
    runs = {"GA (NSGA-II + local steps)": [], "random search": []}
    for seed in range(seeds):
        engine = Engine(space, np.random.default_rng(seed), population=8, seeds=[space.baseline()])
        run_search(engine, _evaluator(replay), Budget(evaluations=budget, patience=10**6))
        runs["GA (NSGA-II + local steps)"].append(best_so_far(engine.seen.values()))
        found = random_search(space, _evaluator(replay), budget, np.random.default_rng(seed))
        runs["random search"].append(best_so_far(found))
    return {name: [(i + 1, float(np.mean([t[min(i, len(t) - 1)] <= optimum for t in trials])))
                   for i in range(budget)] for name, trials in runs.items()}


def compare(budget: int, seeds: int, path: Path = RECORDING) -> tuple[float, float, int, int]:
    space, replay = recorded(path)
    ga = [ga_best(space, replay, budget, s) for s in range(seeds)]
    rnd = [random_best(space, replay, budget, s) for s in range(seeds)]
    wins = sum(a < b for a, b in zip(ga, rnd))
    losses = sum(a > b for a, b in zip(ga, rnd))
    return statistics.median(ga), statistics.median(rnd), wins, losses


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, default=21)
    parser.add_argument("--budgets", type=int, nargs="+", default=[15, 20, 30, 40, 60])
    parser.add_argument("--svg", help="also write the median best-so-far curves to this SVG file")
    args = parser.parse_args()
    space, replay = recorded()
    optimum = score(_evaluator(replay)(list(replay.answers)))
    print(f"recorded space: {len(replay.answers)} genomes, {space}")
    print(f"optimum (spills*1e5 + instructions): {optimum:g}")
    print("budget  GA median  random median  GA better/worse (of seeds)")
    for budget in args.budgets:
        ga, rnd, wins, losses = compare(budget, args.seeds)
        print(f"{budget:6d}  {ga:9g}  {rnd:13g}  {wins}/{losses} of {args.seeds}")
    if args.svg:
        from svg import chart
        curves = traces(max(args.budgets), args.seeds, optimum)
        Path(args.svg).write_text(chart(curves, f"seeds (of {args.seeds}) that found the optimum, recorded space",
                                        "evaluations", "share of seeds at the optimum"))
        print(f"wrote {args.svg}")


if __name__ == "__main__":
    main()
