"""GA (NSGA-II) against random search at equal evaluation budgets, on a
recorded space (replayed: no compiler, no GPU needed). Prints, per budget, the
median over seeds of the best point found and how often each wins.

Recordings (benchmarks/record_space.py): tests/data/recorded/spill_space.jsonl
(static: fewest spill bytes, then fewest instructions) and
benchmarks/data/h200-reduce_sum-space.jsonl (runtime on the H200, every
genome checked against numpy; `--objective runtime`).

    .venv/bin/python benchmarks/ga_vs_random.py [--seeds 11] [--budgets 15 25 40]
    .venv/bin/python benchmarks/ga_vs_random.py --recording benchmarks/data/h200-reduce_sum-space.jsonl \
        --objective runtime --within 0.01 --svg benchmarks/ga_vs_random_h200.svg
"""
from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import numpy as np

from nvcc_evo.measure.replay import Replay
from nvcc_evo.engine.evolve import Budget, Engine, Evaluation, random_search, run_search
from nvcc_evo.engine.space import Dimension, SearchSpace
from nvcc_evo.execute.store import Store

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
RECORDING = ROOT / "tests" / "data" / "recorded" / "spill_space.jsonl"


def recorded(path: Path = RECORDING) -> tuple[SearchSpace, Replay]:
    """The space is every genome in the recording, dimension by dimension."""
    replay = Replay(Store(path).read())
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


# objective name -> one number to minimise from a recorded measurement
OBJECTIVES = {
    "static": lambda m: m.get("spills") * 100_000 + m.get("instructions"),   # spills, then instructions
    "runtime": lambda m: m.get("runtime"),
}


def _evaluator(replay: Replay, objective: str = "static"):
    value_of = OBJECTIVES[objective]

    def evaluate(genomes):
        out = []
        for genome in genomes:
            measurement = replay.measure(genome)
            value = value_of(measurement) if measurement.ok else float("inf")
            out.append(Evaluation(genome, (value,), status=measurement.status))
        return out
    return evaluate


def ga_best(space, replay, budget: int, seed: int, objective: str = "static") -> float:
    engine = Engine(space, np.random.default_rng(seed), population=8, seeds=[space.baseline()])
    run_search(engine, _evaluator(replay, objective), Budget(evaluations=budget, patience=10**6))
    return score(engine.seen.values())


def random_best(space, replay, budget: int, seed: int, objective: str = "static") -> float:
    return score(random_search(space, _evaluator(replay, objective), budget, np.random.default_rng(seed)))


def best_so_far(evaluations) -> list[float]:
    """Best score after each evaluation, in the order they were made."""
    best, trace = float("inf"), []
    for evaluation in evaluations:
        if evaluation.feasible:
            best = min(best, evaluation.objectives[0])
        trace.append(best)
    return trace


def best_so_far_runs(space, evaluate, budget: int, seeds: int) -> dict[str, list[list[float]]]:
    """Per seed, the best score after each evaluation: the GA's and random search's."""
    runs = {"GA (NSGA-II + local steps)": [], "random search": []}
    for seed in range(seeds):
        engine = Engine(space, np.random.default_rng(seed), population=8, seeds=[space.baseline()])
        run_search(engine, evaluate, Budget(evaluations=budget, patience=10**6))
        runs["GA (NSGA-II + local steps)"].append(best_so_far(engine.seen.values()))
        runs["random search"].append(best_so_far(random_search(space, evaluate, budget, np.random.default_rng(seed))))
    return runs


def after(trace: list[float], evaluations: int) -> float:
    """The best score after that many evaluations (the last, for a run that stopped early)."""
    return trace[min(evaluations, len(trace)) - 1]


def traces(budget: int, seeds: int, goal: float, path: Path = RECORDING,
           objective: str = "static") -> dict[str, list[tuple[float, float]]]:
    """Share of seeds that have reached `goal` (the optimum, or within a
    tolerance of it) after each evaluation, GA and random search."""
    space, replay = recorded(path)
    runs = best_so_far_runs(space, _evaluator(replay, objective), budget, seeds)
    return {name: [(i, float(np.mean([after(t, i) <= goal for t in trials]))) for i in range(1, budget + 1)]
            for name, trials in runs.items()}


def compare(budget: int, seeds: int, path: Path = RECORDING,
            objective: str = "static") -> tuple[float, float, int, int]:
    space, replay = recorded(path)
    ga = [ga_best(space, replay, budget, s, objective) for s in range(seeds)]
    rnd = [random_best(space, replay, budget, s, objective) for s in range(seeds)]
    wins = sum(a < b for a, b in zip(ga, rnd))
    losses = sum(a > b for a, b in zip(ga, rnd))
    return statistics.median(ga), statistics.median(rnd), wins, losses


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, default=21)
    parser.add_argument("--budgets", type=int, nargs="+", default=[15, 20, 30, 40, 60])
    parser.add_argument("--recording", type=Path, default=RECORDING)
    parser.add_argument("--objective", choices=sorted(OBJECTIVES), default="static")
    parser.add_argument("--within", type=float, default=0.0,
                        help="count a seed as at the optimum within this relative tolerance (measured spaces)")
    parser.add_argument("--svg", help="also write the share-of-seeds curves to this SVG file")
    args = parser.parse_args()
    space, replay = recorded(args.recording)
    everything = _evaluator(replay, args.objective)(list(replay.answers))
    optimum = score(everything)
    baseline = everything[0].objectives[0]
    print(f"recorded space: {len(replay.answers)} genomes ({sum(e.feasible for e in everything)} feasible), {space}")
    print(f"optimum ({args.objective}): {optimum:g}; baseline {baseline:g} ({baseline / optimum:.3f}x the optimum)")
    print("budget  GA median  random median  GA better/worse (of seeds)")
    for budget in args.budgets:
        ga, rnd, wins, losses = compare(budget, args.seeds, args.recording, args.objective)
        print(f"{budget:6d}  {ga:9g}  {rnd:13g}  {wins}/{losses} of {args.seeds}")
    if args.svg:
        from nvcc_evo.report.plots import curves_figure, save
        goal = optimum * (1 + args.within)
        curves = traces(max(args.budgets), args.seeds, goal, args.recording, args.objective)
        at = "at the optimum" if not args.within else f"within {args.within:.0%} of the optimum"
        for name, points in curves.items():
            marks = ", ".join(f"{points[b - 1][1] * args.seeds:.0f}/{args.seeds} after {b}" for b in args.budgets)
            print(f"{name}: seeds {at}: {marks}")
        save(curves_figure(curves, f"seeds (of {args.seeds}) {at}, {args.recording.name}", "evaluations",
                           f"share of seeds {at}"), Path(args.svg))
        print(f"wrote {args.svg}")


if __name__ == "__main__":
    main()
