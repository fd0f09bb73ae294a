"""The search's old defaults against its new ones at the same wall time (issue 26, point 6), on a GPU.

    python3 benchmarks/defaults.py [--old OLD_TREE] --seconds 30 --seeds 0 1 2 --at-once 2 --out out/defaults
    python3 benchmarks/defaults.py --merge out/a/results.json out/b/results.json   # one table of several calls

Every unit of kernels/ is retuned from an empty results store, once per (seed, defaults), each run
giving every unit the same `--time-limit`: the old defaults are an older tree's own (`--old`: a
folder holding its `nvcc_evo` package; before issue 26: 60 evaluations, patience 4, no restarts, so
a search may stop before its time is up) or, without `--old`, their stop rule in this tree
(`--evaluations 60 --patience 4`; this tree's operators, including the diversification it starts
after two stagnant generations, so it is nearer the new defaults than the old tree was), the new
ones this tree's (the time is the budget; a stagnant search diversifies until it ends). The old and new runs of a seed follow each other, in
turns (old first for even seeds), so a drift of the GPU favours neither. `--at-once` units are
searched at a time in each run (the GPU shared one candidate at a time, as `--at-once` does for a
user), the same for both.

Each unit's entry in the copy is emptied (a target block with no knobs), so no run starts from the
knobs tuned before, nor from the curated starting points a new unit gets: what is compared is the
search. The best found by a run is its lowest fully timed runtime over its own baseline's (both in
its results store, measured in the same process): a speedup. Per kernel, each run's speedup against
the best any run found (both defaults, every seed) is printed side by side, and last one line per
defaults: how many (kernel, seed) ended within 2% of that best.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WITHIN = 0.02


def emptied(acf_text: str) -> str:
    """The ACF with each `target ARCH { ... }` block replaced by an empty one."""
    out, at = [], 0
    for found in re.finditer(r"^( *)target (\S+) \{\n", acf_text, re.M):
        if found.start() < at:
            continue
        depth, end = 1, found.end()
        while depth:
            brace = re.compile(r"[{}]").search(acf_text, end)
            depth += 1 if brace.group() == "{" else -1
            end = brace.end()
        out.append(acf_text[at:found.start()] + f"{found.group(1)}target {found.group(2)} {{\n{found.group(1)}}}")
        at = end
    return "".join(out) + acf_text[at:]


def project(folder: Path) -> Path:
    shutil.copytree(ROOT / "kernels", folder, ignore=shutil.ignore_patterns(".nvcc-evo", "__pycache__"))
    acf = folder / "nvcc-evo.acf"
    acf.write_text(emptied(acf.read_text()))
    return acf


OLD_RULE = ["--evaluations", "60", "--patience", "4"]     # the stop rule before issue 26


def retune(tree: Path, acf: Path, seed: int, args, extra: list[str]) -> float:
    """One retune of every unit; its wall time."""
    env = dict(os.environ, PYTHONFAULTHANDLER="1",       # (a stalled run's threads are dumped before it is killed)
               PYTHONPATH=os.pathsep.join([str(tree), *os.environ.get("PYTHONPATH", "").split(os.pathsep)]))
    argv = [sys.executable, "-m", "nvcc_evo", "--retune", "--acf", str(acf), "--all", "--backend", args.backend,
            "--seed", str(seed), "--time-limit", str(args.seconds), "--at-once", str(args.at_once),
            "--progress", "lines", *extra]
    started = time.monotonic()
    with open(acf.parent / "retune.out", "w") as out, open(acf.parent / "retune.err", "w") as err:
        run = subprocess.Popen(argv, cwd=acf.parent, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                               start_new_session=True)
        why = watch(run, Path(err.name), started, args)
        if why:                                   # a run that hangs ends here, and says so: the others still run
            os.killpg(run.pid, signal.SIGABRT)    # every process of it prints its threads' stacks (faulthandler)
            time.sleep(3)
            os.killpg(run.pid, signal.SIGKILL)
            run.wait()
            print(f"{acf.parent.name}: stopped: {why} (its threads' stacks: {err.name})", file=sys.stderr, flush=True)
    return time.monotonic() - started


def watch(run: subprocess.Popen, err: Path, started: float, args) -> str:
    """Why the run must be stopped ('' once it has ended): past --run-timeout, or no new line
    of progress for --stall seconds."""
    size, grew = -1, time.monotonic()
    while run.poll() is None:
        now = time.monotonic()
        if err.stat().st_size != size:
            size, grew = err.stat().st_size, now
        if now - started > args.run_timeout:
            return f"--run-timeout {args.run_timeout:g} s"
        if now - grew > args.stall:
            return f"no progress for --stall {args.stall:g} s"
        time.sleep(0.5)
    return ""


def best_speedups(store: Path, metric: str = "runtime") -> dict:
    """{unit: (baseline runtime / best fully timed runtime, evaluations)} of one run's results store
    (a unit's baseline: its first record, measured before any candidate)."""
    runs: dict = {}
    for line in store.read_text().splitlines() if store.exists() else ():
        record = json.loads(line)
        unit, runtime = record["context"]["unit"].strip('"'), record["metrics"].get(metric)
        entry = runs.setdefault(unit, {"baseline": None, "best": float("inf"), "count": 0})
        entry["count"] += 1
        first = entry["count"] == 1            # a unit's first record is its baseline, measured before any candidate
        if record["status"] != "ok" or runtime is None or record.get("detail", "").startswith("raced:"):
            continue
        if first:
            entry["baseline"] = runtime
        entry["best"] = min(entry["best"], runtime)
    return {unit: (e["baseline"] / e["best"] if e["baseline"] else float("nan"), e["count"]) for unit, e in runs.items()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--old", type=Path, help="a folder holding the old tree's nvcc_evo package (default: "
                        "the old stop rule in this tree, " + " ".join(OLD_RULE) + ")")
    parser.add_argument("--merge", type=Path, nargs="+", help="print one table of these runs' results.json, run nothing")
    parser.add_argument("--seconds", type=float, default=12.0, help="the time per unit, both defaults (default 12)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--at-once", type=int, default=4, help="units searched at a time in each run (default 4)")
    parser.add_argument("--out", type=Path, default=Path("out/defaults"))
    parser.add_argument("--backend", default="pycuda", help="pycuda (default); static: a smoke test without a GPU")
    parser.add_argument("--metric", default="runtime", help="the metric compared (static: registers)")
    parser.add_argument("--run-timeout", type=float, help="seconds one retune of every unit may take "
                        "(default: 3 x the units' time over --at-once, plus 120 s)")
    parser.add_argument("--defaults", nargs="+", choices=("old", "new"), default=["old", "new"],
                        help="which defaults run (default both)")
    parser.add_argument("--stall", type=float, default=120.0, help="seconds a retune may say nothing before it "
                        "is stopped, its stacks dumped (default 120)")
    args = parser.parse_args()
    if args.merge:
        return merged(args)
    units = sum(1 for line in (ROOT / "kernels" / "nvcc-evo.acf").read_text().splitlines() if line.startswith("unit "))
    args.run_timeout = args.run_timeout or 3 * units * args.seconds / args.at_once + 120
    args.out.mkdir(parents=True, exist_ok=True)
    results, walls = {}, {}
    for seed in args.seeds:
        old = (args.old or ROOT, [] if args.old else OLD_RULE)
        order = [("old", old), ("new", (ROOT, []))] if seed % 2 == 0 else [("new", (ROOT, [])), ("old", old)]
        for name, (tree, extra) in [(n, run) for n, run in order if n in args.defaults]:
            folder = args.out / f"{name}-seed{seed}"
            shutil.rmtree(folder, ignore_errors=True)
            acf = project(folder)
            walls[name, seed] = retune(tree.resolve(), acf, seed, args, extra)
            results[name, seed] = best_speedups(folder / ".nvcc-evo" / "results.jsonl", args.metric)
            print(f"{name} seed {seed}: {walls[name, seed]:.0f} s", file=sys.stderr, flush=True)
            (args.out / "results.json").write_text(json.dumps(
                [{"defaults": n, "seed": s, "wall": walls[n, s], "units": r, "seconds": args.seconds,
                  "at_once": args.at_once, "old": str(args.old or " ".join(OLD_RULE))} for (n, s), r in results.items()]))
    print(table(results, walls, args))
    return 0


def merged(args) -> int:
    """One table of the runs several calls saved (the same --seconds and --at-once in each)."""
    runs = [run for path in args.merge for run in json.loads(path.read_text())]
    shapes = {(run["seconds"], run["at_once"], run["old"]) for run in runs}
    if len(shapes) != 1:
        raise SystemExit(f"the runs differ in --seconds, --at-once or the old defaults: {sorted(shapes)}")
    args.seconds, args.at_once, _ = shapes.pop()
    results = {(run["defaults"], run["seed"]): {u: tuple(v) for u, v in run["units"].items()} for run in runs}
    walls = {(run["defaults"], run["seed"]): run["wall"] for run in runs}
    args.seeds = sorted({seed for _, seed in results})
    print(table(results, walls, args))
    return 0


def table(results: dict, walls: dict, args) -> str:
    units = sorted({u for r in results.values() for u in r})
    names = [n for n in ("old", "new") if any(key[0] == n for key in results)]
    head = ["kernel", "best"] + [f"{n} s{s}" for n in names for s in args.seeds]
    lines = [f"Old defaults (60 evaluations, patience 4) against new (time budget, restarts), {args.seconds:g} s "
             f"per unit, {args.at_once} at once; speedup of the best found over the run's baseline "
             "(evaluations), and its ratio to the best any run found", "",
             "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    within = {n: 0 for n in names}
    for unit in units:
        found = {key: results[key].get(unit, (float("nan"), 0)) for key in results}
        best = max((v for v, _ in found.values() if v == v), default=float("nan"))
        cells = []
        for n in names:
            for s in args.seeds:
                if (n, s) not in results:          # (a run another call kept, or none)
                    cells.append("-")
                    continue
                speedup, count = found[n, s]
                within[n] += speedup >= best * (1 - WITHIN)
                cells.append(f"{speedup:.3f}x ({count}) {speedup / best:.3f}")
        lines.append(f"| {unit} | {best:.3f}x | " + " | ".join(cells) + " |")
    runs = {n: sum(1 for key in results if key[0] == n) for n in names}
    lines += [""] + [f"{n}: {within[n]} of {len(units) * runs[n]} (kernel, seed) within {WITHIN:.0%} of the best; wall "
                     f"{sum(walls.get((n, s), 0) for s in args.seeds):.0f} s" for n in names]
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
