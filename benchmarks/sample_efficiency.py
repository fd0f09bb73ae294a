"""Measurements to a good point, the old engine against the new, on a GPU: one kernel per device call (issue 40).

    python3 benchmarks/sample_efficiency.py --unit softmax.cu --out $OUT
    (on the H200, one device call per kernel: bash benchmarks/sample_efficiency_h200.sh $OUT softmax.cu)
    python3 benchmarks/sample_efficiency.py --unit softmax.cu --backend static --evaluations 12 --out /tmp/se
    (a dry run of the logic without a GPU: ptxas's registers stand for the runtime)

For one unit of kernels/ (a copy, its target blocks emptied: no run starts from the knobs tuned before),
seven searches in one process, sharing the measuring process and the toolkit: first a reference search of
three times the budget (the new engine, seed 100), then per seed (`--seeds`, 0 1 2) the old and the new
engine, in turns (old first for even seeds, so a drift of the GPU favours neither). The old engine is the
evolutionary operators alone (`retune.search = operators`, `--old`), the new the tree's default (`--new`;
where the default is the old engine itself, the guided search, said). Each search is a retune's search
(retune.search.prepare, then retune.search.tune: baseline and engine) of `--evaluations` candidates from its own empty results
store, without the steps after it (confirmation, kernels compared, write-back; no time kept back for them):
what is counted is the engine's measurements. A candidate's speedup is its runtime over its own search's
baseline's (both timed in the same process; a failed or raced candidate counts 0); the best point is the
reference's best speedup; a run's count is the candidates it measured, in order, until one came within 1% of
it (">N" where none did). Each run after the reference is given a time cap (three times what the reference
took for as many candidates, less what the runs after it are expected to take; a run left less than half its
expected time is skipped, said), so the call ends within `--wall`; results.json (every run's speedups in
order) and table.md are written to `--out` after each run.
"""
from __future__ import annotations

import argparse
import faulthandler
import json
import shutil
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from defaults import project  # noqa: E402
from nvcc_evo import backends  # noqa: E402
from nvcc_evo.acf.resolve import load  # noqa: E402
from nvcc_evo.driver import settings  # noqa: E402
from nvcc_evo.driver.project import open_project  # noqa: E402
from nvcc_evo.driver.toolkit import load_toolkit  # noqa: E402
from nvcc_evo.execute.devices import close_pool, measuring_gpu  # noqa: E402
from nvcc_evo.execute.store import Store  # noqa: E402
from nvcc_evo.measure.backend import composed  # noqa: E402
from nvcc_evo.retune.scope.options import Options, Request, choose_settings, decide_options  # noqa: E402
from nvcc_evo.retune.run import Where  # noqa: E402
from nvcc_evo.retune.scope.tasks import find_tasks  # noqa: E402
from nvcc_evo.retune.search.prepare import Retune, prepare  # noqa: E402
from nvcc_evo.retune.search.tune import search  # noqa: E402

WITHIN = 0.01
REFERENCE_SEED = 100


def engines(old: str, new: str | None) -> tuple[str, str, str]:
    """(old, new, a note): the new engine is the tree's default unless named; where that is the old
    engine itself, the guided search."""
    default = str(settings.BY_NAME["retune.search"].default)
    if new is not None:
        return old, new, f"new: {new} (named)"
    if default != old:
        return old, default, f"new: {default} (the default)"
    return old, "guided", f"new: guided (the default, {default}, is the old engine)"


def set_up(acf: Path, unit: str, args) -> tuple[Options, object, object]:
    """The options, toolkit and task of the unit's search, as a retune decides them (retune.run)."""
    opened = open_project("the benchmark", str(acf), (unit,))
    request = Request(acf=str(acf), globs=(unit,), backend=args.backend, evaluations=args.evaluations,
                      progress="lines", timeout=args.timeout, target=args.target)      # (no target: the GPU's)
    toolkit = load_toolkit(opened.real_nvcc())
    options = decide_options(request, choose_settings(request, opened.settings), Where(None))
    tasks, skipped, _ = find_tasks(load(acf), acf, toolkit, options.selection(),
                                   measuring_gpu(options.measuring(), options.dry_run), run_benches=True)
    if len(tasks) != 1:
        raise SystemExit(f"{unit}: {len(tasks)} searches to run, not one ({'; '.join(skipped)})")
    return options, toolkit, tasks[0]


def no_reserve() -> float:
    """The time kept back for the steps after a search: none, as none runs here."""
    return 0.0


def one_search(options: Options, toolkit, task, acf: Path, folder: Path, search_kind: str, seed: int,
               evaluations: int, seconds: float) -> None:
    """One search of the task into `folder`'s results store."""
    sources = dict(options.sources, **{"retune.time-limit": "the benchmark's cap"})
    run = replace(options, search=search_kind, seed=seed, evaluations=evaluations, seconds=seconds,
                  sources=tuple(sources.items()))
    folder.mkdir(parents=True, exist_ok=True)
    retune = Retune(run.preparing(), run.searching(), toolkit, Store(folder / "results.jsonl"), acf)
    prepared = prepare(task, retune)
    prepared.measurer = composed(prepared.measurer, reserve=no_reserve)     # no step after the search here
    try:
        search(prepared, retune, np.random.default_rng(seed))
    finally:
        if prepared.lanes is not None:
            prepared.lanes.close()
        prepared.evaluator.measured.tally.stop()


def speedups(store: Path, metric: str) -> list[float]:
    """Each candidate's speedup over its search's baseline (its first record), in the order measured; 0 for
    a failed or raced candidate (raced: timed only until clearly slower than the best so far)."""
    records = [json.loads(line) for line in store.read_text().splitlines()] if store.exists() else []
    if not records or records[0]["status"] != "ok":
        return []
    baseline = records[0]["metrics"][metric]
    out = []
    for record in records[1:]:
        value = record["metrics"].get(metric)
        raced = record.get("raced", False) or record.get("detail", "").startswith("raced:")
        out.append(baseline / value if record["status"] == "ok" and value and not raced else 0.0)
    return out


def to_best(found: list[float], best: float) -> int | None:
    """Candidates measured until one came within WITHIN of `best` (None: none did)."""
    return next((i + 1 for i, s in enumerate(found) if s >= best * (1 - WITHIN)), None)


def plan_of(seeds: list[int], evaluations: int) -> list[tuple[str, int, int]]:
    """(engine, seed, evaluations) in order: the reference, then old and new per seed in turns."""
    plan = [("new", REFERENCE_SEED, 3 * evaluations)]
    for seed in seeds:
        plan += [(e, seed, evaluations) for e in (("old", "new") if seed % 2 == 0 else ("new", "old"))]
    return plan


def time_cap(left: float, per_candidate: float | None, evaluations: int, after: int) -> int | None:
    """A run's time cap: the time left, for the reference (`per_candidate` None); for a later run, three
    times what the reference took for as many candidates, less what the `after` runs after it are expected
    to take; None where that leaves it less than half its expected time (skipped)."""
    if per_candidate is None:
        return int(left)
    expected = per_candidate * evaluations
    cap = min(3 * expected, left - after * expected)
    return int(cap) if cap >= expected / 2 else None


def run_all(args) -> dict:
    old, new, note = engines(args.old, args.new)
    kind = {"old": old, "new": new}
    started = time.monotonic()
    for made in [args.out / "project", *args.out.glob("*-seed*")]:      # (an earlier call's)
        shutil.rmtree(made, ignore_errors=True)
    acf = project(args.out / "project")
    options, toolkit, task = set_up(acf, args.unit, args)
    result = {"unit": args.unit, "backend": options.backend, "target": options.target, "old": old, "new": new,
              "note": note, "evaluations": args.evaluations, "metric": args.metric, "within": WITHIN, "runs": []}
    plan = plan_of(args.seeds, args.evaluations)
    per_candidate = None                  # the reference's seconds per candidate: each later run's cap from it
    for index, (engine, seed, evaluations) in enumerate(plan):
        left = args.wall - (time.monotonic() - started)
        cap = time_cap(left, per_candidate, evaluations, len(plan) - index - 1)
        if cap is None:
            print(f"{engine} seed {seed} skipped: {left:.0f} s of --wall left", file=sys.stderr, flush=True)
            result["runs"].append({"engine": engine, "seed": seed, "evaluations": evaluations, "skipped": True})
            continue
        folder, began, error = args.out / f"{engine}-seed{seed}", time.monotonic(), ""
        try:
            one_search(options, toolkit, task, acf, folder, kind[engine], seed, evaluations, max(cap, 1))
        except Exception as failed:         # (one run's failure is the table's, not the call's)
            error = f"{type(failed).__name__}: {failed}"
        wall = time.monotonic() - began
        found = speedups(folder / "results.jsonl", args.metric)
        if per_candidate is None:
            per_candidate = wall / max(1, len(found) + 1)
        result["runs"].append({"engine": engine, "search": kind[engine], "seed": seed, "evaluations": evaluations,
                               "cap": cap, "wall": round(wall, 1), "speedups": found,
                               **({"error": error} if error else {})})
        write(args.out, result)
        print(f"{engine} ({kind[engine]}) seed {seed}: {len(found)} measured in {wall:.0f} s" + (f"; {error}" if error
              else ""), file=sys.stderr, flush=True)
    return result


def table(result: dict) -> str:
    """The runs' counts to within WITHIN of the reference's best, per engine and seed, and their means."""
    runs = [r for r in result["runs"] if not r.get("skipped")]
    reference = max(runs[0]["speedups"], default=0.0) if runs else 0.0
    evaluations = result["evaluations"]
    lines = [f"## {result['unit']}: measurements to within {WITHIN:.0%} of the best a search of {3 * evaluations} "
             f"finds ({result['backend']}, {result['target']}; old: {result['old']}, {result['note']})", "",
             f"reference (new, seed {REFERENCE_SEED}): best {reference:.3f}x over its baseline, "
             f"{len(runs[0]['speedups']) if runs else 0} measured", "",
             "| engine | seed | measurements to the best | its best | measured | seconds |",
             "|---|---|---|---|---|---|"]
    counts: dict[str, list] = {"old": [], "new": []}
    for run in result["runs"][1:]:
        if run.get("skipped"):
            lines.append(f"| {run['engine']} | {run['seed']} | skipped (out of time) | | | |")
            continue
        count = to_best(run["speedups"], reference)
        counts[run["engine"]].append(count)
        shown = str(count) if count else f">{len(run['speedups'])}"
        lines.append(f"| {run['engine']} ({run['search']}) | {run['seed']} | {shown} | "
                     f"{max(run['speedups'], default=0.0):.3f}x | {len(run['speedups'])} | {run['wall']:.0f} |"
                     + (f" {run['error']}" if run.get("error") else ""))
    lines.append("")
    for engine, found in counts.items():
        if found:
            reached = [c for c in found if c]
            mean = sum(c or evaluations + 1 for c in found) / len(found)
            lines.append(f"- {engine}: reached in {len(reached)} of {len(found)} runs, mean {mean:.1f} measurements "
                         f"(a run that did not reach it counted as {evaluations + 1})")
    return "\n".join(lines) + "\n"


def write(out: Path, result: dict) -> None:
    (out / "results.json").write_text(json.dumps(result, indent=1))
    (out / "table.md").write_text(table(result))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--unit", required=True, help="a unit of kernels/nvcc-evo.acf (its glob)")
    parser.add_argument("--evaluations", type=int, default=30, help="each run's budget (the reference: 3x)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--wall", type=float, default=450.0, help="seconds for every search of this call")
    parser.add_argument("--old", default="operators", help="the old engine's retune.search (default: operators)")
    parser.add_argument("--new", default=None, help="the new engine's (default: the tree's default)")
    parser.add_argument("--backend", default="pycuda", help="pycuda (default); static: a dry run without a GPU")
    parser.add_argument("--target", default=None, help="the architecture (default: the GPU's; static: sm_90)")
    parser.add_argument("--metric", default=None, help="the metric compared (default: runtime; static: registers)")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds a compile or GPU run may take")
    parser.add_argument("--out", type=Path, default=Path("out/sample-efficiency"))
    args = parser.parse_args()
    row = backends.row(args.backend)
    args.target = args.target or (None if row.needs_gpu else "sm_90")      # (a GPU's: its own)
    args.metric = args.metric or ("registers" if row.facts_only else "runtime")
    args.out = args.out.resolve()
    args.out.mkdir(parents=True, exist_ok=True)
    faulthandler.dump_traceback_later(args.wall + 60, exit=True)     # a hang ends the call; results.json stays
    try:
        result = run_all(args)
    finally:
        close_pool()
    print(table(result), end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
