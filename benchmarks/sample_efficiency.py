"""Measurements to a good point, the old engine (the evolutionary operators alone) against the new (a
surrogate proposes half of each generation, engine.surrogate), on a GPU (issue 40).

    python3 benchmarks/sample_efficiency.py --unit softmax.cu --evaluations 30 --seeds 0 1 2 --wall 520 --out OUT

For one unit of kernels/: first a reference search of three times the budget (the new engine, seed 100),
then, per seed, the old and the new engine (`retune.search = operators` against `guided`, the same tree),
in turns (old first for even seeds, so a drift of the GPU favours neither), each a retune of `--evaluations`
from an empty results store and an emptied target block (benchmarks/defaults.py's project). Every run's
speedups are its candidates' runtimes over its own baseline's (both timed in the same process). The best
point is the best speedup the reference found (or any run, where one found better, said); a run's count is
the candidates it measured, in order, until one came within 1% of that best (">N" where none did). A run
is started only where `--wall` leaves it the time the reference took for a third of its budget, so a call
cut short keeps the runs that ended; results.json is written after each run.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from defaults import project, watch  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
WITHIN = 0.01
SEARCH = {"old": "operators", "new": "guided"}


def retune(acf: Path, unit: str, seed: int, evaluations: int, engine: str, args) -> float:
    """One retune of the unit; its wall time (stopped past --run-timeout, said)."""
    env = dict(os.environ, NVCC_EVO_SEARCH=SEARCH[engine], PYTHONFAULTHANDLER="1",
               PYTHONPATH=os.pathsep.join([str(ROOT), *os.environ.get("PYTHONPATH", "").split(os.pathsep)]))
    argv = [sys.executable, "-m", "nvcc_evo", "--retune", "--acf", str(acf), unit, "--backend", args.backend,
            "--seed", str(seed), "--evaluations", str(evaluations), "--progress", "lines"]
    started = time.monotonic()
    with open(acf.parent / "retune.out", "w") as out, open(acf.parent / "retune.err", "w") as err:
        run = subprocess.Popen(argv, cwd=acf.parent, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                               start_new_session=True)
        why = watch(run, Path(err.name), started, args)
        if why:
            os.killpg(run.pid, signal.SIGKILL)
            run.wait()
            print(f"{acf.parent.name}: stopped: {why}", file=sys.stderr, flush=True)
    return time.monotonic() - started


def speedups(store: Path, metric: str) -> list[float]:
    """Each candidate's speedup over the run's baseline (its first record), in the order measured; 0 for
    a failed or raced candidate (raced: clearly slower than the best so far)."""
    records = [json.loads(line) for line in store.read_text().splitlines()] if store.exists() else []
    if not records or records[0]["status"] != "ok":
        return []
    baseline = records[0]["metrics"][metric]
    out = []
    for record in records[1:]:
        value = record["metrics"].get(metric)
        ok = record["status"] == "ok" and value and not record.get("detail", "").startswith("raced:")
        out.append(baseline / value if ok else 0.0)
    return out


def to_best(found: list[float], best: float) -> int | None:
    """Candidates measured until one came within WITHIN of `best` (None: none did)."""
    return next((i + 1 for i, s in enumerate(found) if s >= best * (1 - WITHIN)), None)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--unit", required=True, help="a unit of kernels/nvcc-evo.acf (its glob)")
    parser.add_argument("--evaluations", type=int, default=30, help="each run's budget (the reference: 3x)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--wall", type=float, default=520.0, help="seconds for every run of this call")
    parser.add_argument("--backend", default="pycuda", help="pycuda (default); static: a smoke test without a GPU")
    parser.add_argument("--metric", default="runtime", help="the metric compared (static: registers)")
    parser.add_argument("--stall", type=float, default=90.0, help="seconds a retune may say nothing")
    parser.add_argument("--out", type=Path, default=Path("out/sample-efficiency"))
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    started, runs = time.monotonic(), []
    plan = [("new", 100, 3 * args.evaluations)]
    for seed in args.seeds:
        plan += [(e, seed, args.evaluations) for e in (("old", "new") if seed % 2 == 0 else ("new", "old"))]
    third = None                  # the reference's time for a third of its budget: what one run is given
    for engine, seed, evaluations in plan:
        left = args.wall - (time.monotonic() - started)
        if third is not None and left < 1.2 * third:
            print(f"{engine} seed {seed} skipped: {left:.0f} s left", file=sys.stderr, flush=True)
            continue
        args.run_timeout = max(30.0, left - 5)
        folder = args.out / f"{engine}-seed{seed}"
        shutil.rmtree(folder, ignore_errors=True)
        wall = retune(project(folder), args.unit, seed, evaluations, engine, args)
        third = third if third is not None else wall / 3
        runs.append({"engine": engine, "seed": seed, "evaluations": evaluations, "wall": wall,
                     "speedups": speedups(folder / ".nvcc-evo" / "results.jsonl", args.metric)})
        (args.out / "results.json").write_text(json.dumps({"unit": args.unit, "runs": runs}))
        print(f"{engine} seed {seed}: {len(runs[-1]['speedups'])} measured in {wall:.0f} s", file=sys.stderr,
              flush=True)
    print(table(args.unit, runs, args.evaluations))
    return 0


def table(unit: str, runs: list[dict], evaluations: int) -> str:
    reference = max(runs[0]["speedups"], default=0.0) if runs else 0.0
    best = max([reference] + [max(r["speedups"], default=0.0) for r in runs])
    lines = [f"{unit}: best {best:.3f}x over the baseline (the reference's {reference:.3f}x, "
             f"{3 * evaluations} measured); candidates measured to within {WITHIN:.0%} of it"]
    counts: dict[str, list] = {"old": [], "new": []}
    for run in runs[1:]:
        count = to_best(run["speedups"], best)
        counts[run["engine"]].append(count)
        shown = str(count) if count else ">" + str(len(run["speedups"]))
        lines.append(f"  {run['engine']} seed {run['seed']}: {shown} (its best {max(run['speedups'], default=0.0):.3f}x, "
                     f"{run['wall']:.0f} s)")
    for engine, found in counts.items():
        if found:
            reached = [c for c in found if c]
            lines.append(f"  {engine}: reached in {len(reached)} of {len(found)} runs, mean "
                         f"{sum(c or evaluations + 1 for c in found) / len(found):.1f} measurements "
                         f"(a run that did not reach it counted as {evaluations + 1})")
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
