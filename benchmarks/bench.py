"""The kernel benchmark (`make bench`, on a GPU): for every unit of
kernels/nvcc-evo.acf with a kernel bench spec, and for every shape it is run
at, the default build against the tuned build of this GPU's target, side by
side in one run.

Per kernel and shape: median runtime and p20..p80 spread of both builds
(interleaved A B A B), speedup with its Mann-Whitney p-value, energy per
launch of both, both builds checked against the unit's numpy reference, the
search's evaluations and wall time (from the provenance), and the distance
to the ceiling measured in the same run: the library (cuBLAS GEMM or
scaled_dot_product_attention, through torch) for GEMMs and attention, the
device's copy bandwidth for memory-bound kernels.

Then the plots, which need no GPU (`--plots-only`): runtime against energy of
every candidate the searches measured, with the Pareto front, per kernel
(from the results store), and GA against random search on a space recorded
on the GPU (benchmarks/record_space.py --gpu): median best-so-far runtime
against evaluations over several seeds.

Prints a markdown table last; writes bench.md, bench.json (every figure,
written after each row) and the SVG plots to --out (plots-only: plots.md).

    python3 benchmarks/bench.py [--out DIR] [--rounds 10] [--plots-only]
"""
from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from nvcc_evo.acf.bench.spec import plan_bench  # noqa: E402
from nvcc_evo.cubin.compile import CompileJob, compile_candidate  # noqa: E402
from nvcc_evo.driver.cmdline.flags import CallFacts, plan_flags  # noqa: E402
from nvcc_evo.engine.evolve import Evaluation, dominates  # noqa: E402
from nvcc_evo.execute.store import Store  # noqa: E402

KERNELS = ROOT / "kernels"
ACF = KERNELS / "nvcc-evo.acf"
SEARCHES = (KERNELS / ".nvcc-evo" / "results.jsonl", ROOT / "benchmarks" / "data" / "h200-search.jsonl")
RECORDING = ROOT / "benchmarks" / "data" / "h200-reduce_sum-space.jsonl"

# Shapes run besides the bench spec's own: `let` values replaced.
SHAPES: dict[str, list[dict]] = {
    "hgemm_decode.cu": [{"M": 16}, {"M": 128}],
    "flash_attention.cu": [{"CAUSAL": 1}],
    "flash_attention_d64.cu": [{"CAUSAL": 1}],
}

# kernel -> the library call it is measured against, from the plan's sizes.
LIBRARY = {
    "sgemm": lambda s: {"kind": "gemm", "dtype": "f32", "m": s["M"], "n": s["N"], "k": s["K"]},
    "hgemm": lambda s: {"kind": "gemm", "dtype": "f16", "m": s["M"], "n": s["N"], "k": s["K"]},
    "flash_attention": lambda s: {"kind": "sdpa", "bh": s["BH"], "lq": s["L"], "lk": s["L"], "d": s["HEAD_DIM"],
                                  "causal": s["CAUSAL"]},
    "decode_attention": lambda s: {"kind": "sdpa", "bh": s["HEADS"], "lq": 1, "lk": s["LEN"], "d": s["HEAD_DIM"],
                                   "causal": 0},
}
LIBRARY_NAME = {"gemm": "cuBLAS", "sdpa": "torch SDPA"}
# Kernels whose copy-bandwidth fraction means nothing (bounded by arithmetic, not memory).
COMPUTE_BOUND = {"sgemm_regblock.cu", "hgemm_wmma.cu", "flash_attention.cu", "flash_attention_d64.cu"}

# Library times in a separate process (torch), the L2 flushed before each call as for our kernels.
TORCH = """
import json, sys, torch
cases = json.loads(sys.argv[1])
torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction = False
l2 = getattr(torch.cuda.get_device_properties(0), "L2_cache_size", 64 << 20)
scratch = torch.empty(2 * l2, dtype=torch.uint8, device="cuda")
def timed(fn):
    for _ in range(20):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(50):
        scratch.zero_()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record(); fn(); end.record(); end.synchronize()
        times.append(start.elapsed_time(end) * 1e3)
    return sorted(times)[len(times) // 2]
out = []
for c in cases:
    if c["kind"] == "gemm":
        dtype = {"f32": torch.float32, "f16": torch.float16}[c["dtype"]]
        a = torch.rand(c["m"], c["k"], device="cuda", dtype=dtype)
        b = torch.rand(c["k"], c["n"], device="cuda", dtype=dtype)
        out.append(timed(lambda: a @ b))
    else:
        q = torch.randn(1, c["bh"], c["lq"], c["d"], device="cuda", dtype=torch.float16)
        k, v = (torch.randn(1, c["bh"], c["lk"], c["d"], device="cuda", dtype=torch.float16) for _ in range(2))
        sdpa = torch.nn.functional.scaled_dot_product_attention
        out.append(timed(lambda: sdpa(q, k, v, is_causal=bool(c["causal"]))))
print(json.dumps(out))
"""


def library_times(cases: list[dict]) -> list[float | None]:
    """Microseconds per library call, one per case (None where torch is missing or fails)."""
    if not cases:
        return []
    try:
        done = subprocess.run([sys.executable, "-c", TORCH, json.dumps(cases)], capture_output=True, text=True,
                              timeout=600)
        return json.loads(done.stdout.strip().splitlines()[-1])
    except (OSError, subprocess.SubprocessError) as error:
        problem = str(error)
    except (ValueError, IndexError):
        problem = done.stderr[-300:]
    print(f"bench: no library ceilings (torch): {problem}", file=sys.stderr)
    return [None] * len(cases)


# ---------------------------------------------------------------- one kernel
def build(toolkit, source: Path, settings: dict, arch: str) -> bytes:
    flags = plan_flags(settings, CallFacts({}, False, False, False), toolkit).flags
    job = CompileJob(toolkit.nvcc, ("-c", source.name), str(source.parent), source.name, arch, flags)
    result = compile_candidate(job)
    if not result.ok:
        raise RuntimeError(f"{source.name}: {result.stderr[-500:]}")
    return result.cubin


def builds(toolkit, unit, arch: str) -> dict:
    """Both sides of one unit: (cubin, defines, knobs, target) for the default
    build (pins only, as the wrapper would pass them) and the tuned one."""
    from nvcc_evo.acf.sources import define_values, unit_defines
    source = KERNELS / unit.globs[0]
    pins = {p.knob: p.value for p in unit.pins}
    target = next((t for t in unit.targets if t.arch == arch), None)
    tuned = {**pins, **({s.knob: s.value for s in target.settings} if target else {})}
    sides = {}
    for side, settings in (("default", pins), ("tuned", tuned)):
        defines = {**unit_defines(unit, source), **define_values(settings)}
        sides[side] = (build(toolkit, source, settings, arch), defines)
    return {"sides": sides, "knobs": {k: v for k, v in tuned.items() if k not in pins}, "target": target}


def bench_shape(pool, unit, built: dict, shape: dict, rounds: int, copy_rate: float) -> dict:
    from nvcc_evo.measure.check import outputs_match
    from nvcc_evo.measure.pycuda.references import reference_outputs
    from nvcc_evo.measure.pycuda.pipe import RunRequest
    from nvcc_evo.measure.stats import faster, summarize
    from nvcc_evo.execute.measurers import load_reference
    plans = {side: plan_bench(unit.bench, defines, lets=shape) for side, (_, defines) in built["sides"].items()}
    cubins = {side: cubin for side, (cubin, _) in built["sides"].items()}
    reference = load_reference(unit.bench, KERNELS)
    expected = reference_outputs(reference, plans["default"]) if reference else None
    problems = {}
    for side in plans:
        answer = pool.request(RunRequest(cubins[side], plans[side], outputs=True))
        if answer.status != "ok":
            problems[side] = f"{answer.status}: {answer.detail}"
        elif expected is not None:
            problems[side] = str(outputs_match(answer.outputs, expected, plans[side]) or "")
    samples = {side: [] for side in plans}
    for _ in range(rounds):
        for side in plans:
            answer = pool.request(RunRequest(cubins[side], plans[side], time=True, min_seconds=0.2))
            samples[side].append(summarize(answer.times_us).median if answer.status == "ok" else math.inf)
    energy = {side: pool.request(RunRequest(cubins[side], plans[side], energy=True)) for side in plans}
    verdict = faster(samples["default"], samples["tuned"])
    target = built["target"]
    record = lambda key: target.record(key).value if target and target.record(key) else None
    row = {"kernel": unit.globs[0], "function": unit.bench.kernel.text, "shape": shape_text(unit, plans["default"]),
           "knobs": built["knobs"],
           "correct": not any(problems.values()), "problems": {k: v for k, v in problems.items() if v},
           "checked_against": "numpy reference" if expected is not None else "nothing",
           "p_value": verdict.p_value, "speedup": verdict.effect, "significant": verdict.significant,
           "evaluations": record("evaluations"), "search_seconds": record("search_seconds"),
           "sizes": dict(plans["default"].sizes)}
    for side, plan in plans.items():
        s = summarize(samples[side])
        row[side] = {"median_us": s.median, "p20_us": s.p20, "p80_us": s.p80,
                     "energy_mj": energy[side].energy_mj, "power_w": energy[side].power_w,
                     "bandwidth_fraction": plan.bytes_moved / (s.median * 1e-6) / copy_rate}
    return row


def shape_text(unit, plan) -> str:
    """The bench's `let` sizes as run (with any replaced by the shape)."""
    sizes = dict(plan.sizes)
    return " ".join(f"{let.name}={sizes[let.name]}" for let in unit.bench.lets)


# ---------------------------------------------------------------- the table
def ceiling_text(row: dict) -> str:
    texts = []
    if row.get("library_us"):
        texts.append(f"{row['library_us'] / row['tuned']['median_us']:.0%} of {row['library']} "
                     f"({row['library_us']:.1f} us)")
    if row["kernel"] not in COMPUTE_BOUND:
        texts.append(f"{row['tuned']['bandwidth_fraction']:.0%} of copy bw")
    return "; ".join(texts)


def geomean(values: list[float]) -> float:
    return float(math.exp(sum(math.log(v) for v in values) / len(values))) if values else float("nan")


def markdown(result: dict) -> str:
    rows, gpu = result["rows"], result["gpu"]
    lines = [f"GPU {gpu['name']} (sm {gpu['cc']}), driver {gpu['driver']}, CUDA {result['toolkit']}; "
             f"copy bandwidth {result['copy_bytes_per_s'] / 1e12:.2f} TB/s; {result['rounds']} interleaved rounds "
             f"per kernel; {result['date']}", "",
             "| kernel | shape | default us (p20-p80) | tuned us (p20-p80) | speedup | p | energy mJ default / tuned "
             "| ceiling (tuned) | search | correct |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        d, t = r["default"], r["tuned"]
        verdict = f"{r['speedup']:.3f}x" + ("" if r["significant"] else " (n.s.)")
        search = f"{r['evaluations']} evals" + (f", {r['search_seconds']:.0f} s" if r["search_seconds"] else "") \
            if r["evaluations"] else "not tuned"
        correct = "yes" if r["correct"] else "NO: " + "; ".join(f"{k}: {v}" for k, v in r["problems"].items())
        lines.append(f"| {r['kernel']} | {r['shape']} | {d['median_us']:.1f} ({d['p20_us']:.1f}-{d['p80_us']:.1f}) | "
                     f"{t['median_us']:.1f} ({t['p20_us']:.1f}-{t['p80_us']:.1f}) | {verdict} | {r['p_value']:.2g} | "
                     f"{d['energy_mj'] or 0:.1f} / {t['energy_mj'] or 0:.1f} | {ceiling_text(r)} | {search} | "
                     f"{correct} |")
    speedups = [r["speedup"] for r in rows if r["correct"]]
    lines += ["", f"Geometric mean speedup over the {len(speedups)} correct rows (not-significant ones at their "
                  f"measured ratio): {geomean(speedups):.3f}x", "", "Tuned knobs (beyond the unit's pins):", ""]
    seen = set()
    for r in rows:
        if r["kernel"] not in seen:
            seen.add(r["kernel"])
            knobs = " ".join(f"{k}={v}" for k, v in r["knobs"].items()) or "(defaults: nothing significant found)"
            lines.append(f"- {r['kernel']}: {knobs}")
    return "\n".join(lines) + "\n"


def run_gpu(out: Path, rounds: int, only: list[str]) -> dict:
    from nvcc_evo.acf.resolve import load
    from nvcc_evo.driver.toolkit import load_toolkit
    from nvcc_evo.driver.wrapper import find_real_nvcc
    from nvcc_evo.measure.pycuda.pool import WorkerPool
    from nvcc_evo.measure.pycuda.pipe import CopyRate
    toolkit = load_toolkit(find_real_nvcc())
    units = [u for u in load(ACF).units if u.bench is not None and u.bench.kernel is not None
             and (not only or u.globs[0] in only)]
    cases = library_cases(units)
    pool = WorkerPool()
    result = {"gpu": pool.hello, "toolkit": toolkit.version, "rounds": rounds, "date": time.strftime("%Y-%m-%d"),
              "rows": []}
    try:
        before = library_times([case for _, case in cases])     # the library, before our kernels ...
        arch = pool.hello["arch"]
        result["copy_bytes_per_s"] = pool.request(CopyRate()).copy_bytes_per_s
        started = time.monotonic()
        for unit in units:
            built = builds(toolkit, unit, arch)
            for shape in [{}] + SHAPES.get(unit.globs[0], []):
                row = bench_shape(pool, unit, built, shape, rounds, result["copy_bytes_per_s"])
                row["case_key"] = case_key(unit, shape)
                result["rows"].append(row)
                (out / "bench.json").write_text(json.dumps(result, indent=1, default=str))
                print(f"bench: {row['kernel']} {row['shape']}: {row['default']['median_us']:.1f} -> "
                      f"{row['tuned']['median_us']:.1f} us ({row['speedup']:.3f}x, p={row['p_value']:.2g}) "
                      f"[{time.monotonic() - started:.0f} s]", file=sys.stderr, flush=True)
    finally:
        pool.close()
    after = library_times([case for _, case in cases])           # ... and after them
    by_key = {row["case_key"]: row for row in result["rows"]}
    for (key, case), runs in zip(cases, zip(before, after)):
        if key in by_key:
            by_key[key].update(library_fields(case, list(runs)))
    (out / "bench.json").write_text(json.dumps(result, indent=1, default=str))
    return result


def case_key(unit, shape: dict) -> str:
    return f"{unit.globs[0]} {json.dumps(shape, sort_keys=True)}"


def library_cases(units) -> list[tuple[str, dict]]:
    """(row key, library call) for every kernel and shape that has a library
    counterpart, sized from the default build's plan."""
    from nvcc_evo.acf.sources import unit_defines
    cases = []
    for unit in units:
        if unit.bench.kernel.text not in LIBRARY:
            continue
        defines = unit_defines(unit, KERNELS / unit.globs[0])
        for shape in [{}] + SHAPES.get(unit.globs[0], []):
            sizes = dict(plan_bench(unit.bench, defines, lets=shape).sizes)
            cases.append((case_key(unit, shape), LIBRARY[unit.bench.kernel.text](sizes)))
    return cases


def library_fields(case: dict, runs: list[float | None]) -> dict:
    """The library's time for one row: the faster of its runs (a library call
    has no reason to be slower than it can be; a slow run is warm-up or clocks)."""
    measured = [r for r in runs if r is not None]
    name = LIBRARY_NAME[case["kind"]] + (f" {case['dtype']}" if "dtype" in case else "")
    return {"library": name, "library_us": min(measured) if measured else None, "library_runs_us": runs}


# ---------------------------------------------------------------- plots
def source_fingerprints() -> dict[str, str]:
    """{unit file: fingerprint of its source as it is now (with its quoted
    includes)}, for the units of kernels/nvcc-evo.acf."""
    from nvcc_evo.acf.resolve import load
    from nvcc_evo.acf.sources import unit_sources
    from nvcc_evo.driver.match.stale import fingerprint
    return {source.name: fingerprint(source) for unit in load(ACF).units
            for source in unit_sources(unit, KERNELS)}


def gpu_records(stores: tuple[Path, ...] = SEARCHES):
    """(unit file, record) of every successful GPU measurement in the results
    stores that exist, in the order they were made, of each unit's source as
    it is now only: an edited kernel's old candidates are another kernel."""
    current = source_fingerprints()
    for store in stores:
        if not store.exists():
            continue
        for record in Store(store).read():
            name = record.context.unit.strip('"')
            if (record.measurement.ok and record.context.device != "cpu"
                    and record.context.fingerprint == current.get(name, record.context.fingerprint)):
                yield name, record


def measured_points(stores: tuple[Path, ...] = SEARCHES) -> dict[str, list[Evaluation]]:
    """(runtime, energy) of every candidate measured on a GPU, per unit (the
    first measurement of a genome counts; a search measures its baseline first)."""
    by_unit: dict[str, dict] = {}
    for name, record in gpu_records(stores):
        m = record.measurement
        if m.get("energy") not in (None, math.inf):
            by_unit.setdefault(name, {}).setdefault(
                record.genome, Evaluation(record.genome, (m.get("runtime"), m.get("energy"))))
    return {unit: list(points.values()) for unit, points in by_unit.items()}


def pareto_front(points: list[Evaluation]) -> list[Evaluation]:
    """The points no other point dominates (both objectives minimised), by runtime."""
    return sorted((p for p in points if not any(dominates(q, p) for q in points)), key=lambda e: e.objectives)


def pareto_plots(out: Path, stores: tuple[Path, ...] = SEARCHES) -> list[Path]:
    """Runtime against energy of every measured candidate, the front in its
    own colour, one SVG per kernel."""
    from nvcc_evo.report.plots import front_figure, save
    written = []
    for unit, points in sorted(measured_points(stores).items()):
        objectives = [p.objectives for p in points]
        figure = front_figure(objectives, [p.objectives for p in pareto_front(points)],
                              f"{unit}: {len(points)} candidates measured on the GPU", "runtime (us)",
                              "energy per launch (mJ)", baseline=objectives[0], log=True)
        written.append(save(figure, out / f"pareto-{Path(unit).stem}.svg"))
    return written


def ga_plot(out: Path, recording: Path = RECORDING, seeds: int = 21, budget: int = 60) -> dict | None:
    """GA against random search on a space recorded on the GPU: median over
    seeds of the best runtime found after each evaluation."""
    if not recording.exists():
        return None
    import ga_vs_random as gvr
    from nvcc_evo.report.plots import curves_figure, save
    space, replay = gvr.recorded(recording)
    evaluate = gvr._evaluator(replay, "runtime")
    everything = evaluate(list(replay.answers))
    optimum, baseline = gvr.score(everything), everything[0].objectives[0]
    runs = gvr.best_so_far_runs(space, evaluate, budget, seeds)
    curves = {name: [(i, float(np.median([gvr.after(t, i) for t in traces]))) for i in range(1, budget + 1)]
              for name, traces in runs.items()}
    path = save(curves_figure(curves, f"best runtime found, median of {seeds} seeds ({recording.name})",
                              "evaluations", "best runtime so far (us)", y_max=optimum * 1.05,
                              reference=("optimum of the recording", optimum)), out / "ga-vs-random-gpu.svg")
    summary = {"recording": recording.name, "genomes": len(replay.answers), "optimum_us": optimum,
               "baseline_us": baseline, "seeds": seeds, "plot": path.name, "budgets": {}}
    ga_runs, random_runs = runs.values()
    for b in (10, 20, 30, 40, 60):
        if b <= budget:
            ga, rnd = [gvr.after(t, b) for t in ga_runs], [gvr.after(t, b) for t in random_runs]
            summary["budgets"][b] = {
                "ga_median_us": float(np.median(ga)), "random_median_us": float(np.median(rnd)),
                "ga_better": int(sum(g < r for g, r in zip(ga, rnd))),
                "ga_worse": int(sum(g > r for g, r in zip(ga, rnd))),
                "ga_within_1pct": int(sum(g <= optimum * 1.01 for g in ga)),
                "random_within_1pct": int(sum(r <= optimum * 1.01 for r in rnd))}
    return summary


def ga_text(summary: dict | None) -> str:
    if not summary:
        return ""
    lines = ["", f"GA against random search on {summary['recording']} ({summary['genomes']} genomes timed on the GPU; "
                 f"optimum {summary['optimum_us']:.1f} us, baseline {summary['baseline_us']:.1f} us), "
                 f"{summary['seeds']} seeds each:", "",
             "| evaluations | GA median us | random median us | GA better / worse "
             "| within 1% of optimum: GA / random |",
             "|---|---|---|---|---|"]
    for budget, b in summary["budgets"].items():
        lines.append(f"| {budget} | {b['ga_median_us']:.2f} | {b['random_median_us']:.2f} | {b['ga_better']} / "
                     f"{b['ga_worse']} | {b['ga_within_1pct']} / {b['random_within_1pct']} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default=str(ROOT / "out" / "bench"))
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--plots-only", action="store_true", help="only the plots (no GPU needed)")
    parser.add_argument("--only", nargs="*", default=[], help="unit files to bench (default: all)")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    plots = [p.name for p in pareto_plots(out)]
    summary = ga_plot(out)
    text = ga_text(summary)
    if not args.plots_only:
        result = run_gpu(out, args.rounds, args.only)
        result["ga_vs_random"], result["plots"] = summary, plots
        (out / "bench.json").write_text(json.dumps(result, indent=1, default=str))
        text = markdown(result) + text
    (out / ("plots.md" if args.plots_only else "bench.md")).write_text(text)    # a plots-only run keeps the table
    for name in ["bench.json"] * (not args.plots_only) + plots + ([summary["plot"]] if summary else []):
        print(f"bench: wrote {out / name}", file=sys.stderr)
    print(text, end="", flush=True)           # the tables, last


if __name__ == "__main__":
    main()
