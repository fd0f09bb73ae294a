"""The search's old defaults against its new ones at the same wall time (issue 26, point 6), on a GPU.

    python3 benchmarks/defaults.py --old OLD_TREE --seconds 12 --seeds 0 1 2 --at-once 4 --out out/defaults

Every unit of kernels/ is retuned from an empty results store, once per (seed, defaults), each run
giving every unit the same `--time-limit`: the old defaults are an older tree's own (`--old`: a
folder holding its `nvcc_evo` package; before issue 26: 60 evaluations, patience 4, no restarts, so
a search may stop before its time is up), the new ones this tree's (the time is the budget; a
stagnant search diversifies until it ends). The old and new runs of a seed follow each other, in
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


def retune(tree: Path, acf: Path, seed: int, args) -> float:
    """One retune of every unit; its wall time."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tree), *os.environ.get("PYTHONPATH", "").split(os.pathsep)]))
    argv = [sys.executable, "-m", "nvcc_evo", "--retune", "--acf", str(acf), "--all", "--backend", args.backend,
            "--seed", str(seed), "--time-limit", str(args.seconds), "--at-once", str(args.at_once),
            "--progress", "lines"]
    started = time.monotonic()
    with open(acf.parent / "retune.out", "w") as out, open(acf.parent / "retune.err", "w") as err:
        run = subprocess.Popen(argv, cwd=acf.parent, env=env, stdout=out, stderr=err, start_new_session=True)
        try:
            run.wait(timeout=args.run_timeout)
        except subprocess.TimeoutExpired:         # a run that hangs ends here, and says so: the others still run
            os.killpg(run.pid, signal.SIGKILL)
            run.wait()
            print(f"{acf.parent.name}: stopped after --run-timeout {args.run_timeout:g} s", file=sys.stderr, flush=True)
    return time.monotonic() - started


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
    parser.add_argument("--old", type=Path, required=True, help="a folder holding the old tree's nvcc_evo package")
    parser.add_argument("--seconds", type=float, default=12.0, help="the time per unit, both defaults (default 12)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--at-once", type=int, default=4, help="units searched at a time in each run (default 4)")
    parser.add_argument("--out", type=Path, default=Path("out/defaults"))
    parser.add_argument("--backend", default="pycuda", help="pycuda (default); static: a smoke test without a GPU")
    parser.add_argument("--metric", default="runtime", help="the metric compared (static: registers)")
    parser.add_argument("--run-timeout", type=float, help="seconds one retune of every unit may take "
                        "(default: 3 x the units' time over --at-once, plus 120 s)")
    args = parser.parse_args()
    units = sum(1 for line in (ROOT / "kernels" / "nvcc-evo.acf").read_text().splitlines() if line.startswith("unit "))
    args.run_timeout = args.run_timeout or 3 * units * args.seconds / args.at_once + 120
    args.out.mkdir(parents=True, exist_ok=True)
    results, walls = {}, {}
    for seed in args.seeds:
        order = [("old", args.old), ("new", ROOT)] if seed % 2 == 0 else [("new", ROOT), ("old", args.old)]
        for name, tree in order:
            folder = args.out / f"{name}-seed{seed}"
            shutil.rmtree(folder, ignore_errors=True)
            acf = project(folder)
            walls[name, seed] = retune(tree.resolve(), acf, seed, args)
            results[name, seed] = best_speedups(folder / ".nvcc-evo" / "results.jsonl", args.metric)
            print(f"{name} seed {seed}: {walls[name, seed]:.0f} s", file=sys.stderr, flush=True)
            (args.out / "results.json").write_text(json.dumps(
                [{"defaults": n, "seed": s, "wall": walls[n, s], "units": r} for (n, s), r in results.items()]))
    print(table(results, walls, args))
    return 0


def table(results: dict, walls: dict, args) -> str:
    units = sorted({u for r in results.values() for u in r})
    names = ("old", "new")
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
                speedup, count = found[n, s]
                within[n] += speedup >= best * (1 - WITHIN)
                cells.append(f"{speedup:.3f}x ({count}) {speedup / best:.3f}")
        lines.append(f"| {unit} | {best:.3f}x | " + " | ".join(cells) + " |")
    total = len(units) * len(args.seeds)
    lines += [""] + [f"{n}: {within[n]} of {total} (kernel, seed) within {WITHIN:.0%} of the best; wall "
                     f"{sum(walls[n, s] for s in args.seeds):.0f} s" for n in names]
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
