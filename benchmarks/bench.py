"""The kernel benchmark (`make bench`, on a GPU): for every unit of
kernels/nvcc-evo.acf with a kernel bench spec, the default build against the
tuned build of its sm_90 target, measured side by side in one run.

Per kernel: median runtime and p20..p80 spread of both (interleaved A B A B),
speedup with its Mann-Whitney p-value, energy per launch of both, the search's
evaluations (from the provenance), and the distance to the ceiling: for
memory-bound kernels the fraction of measured device copy bandwidth, for the
GEMM the fraction of cuBLAS's fp32 rate (torch, TF32 off) measured in the same
run. Prints a markdown table last and writes every figure to JSON.

    python3 benchmarks/bench.py [--out DIR] [--rounds 10]
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from nvcc_evo.benchspec import plan_bench  # noqa: E402
from nvcc_evo.compile import CompileJob, compile_candidate  # noqa: E402
from nvcc_evo.flags import CallFacts, plan_flags  # noqa: E402
from nvcc_evo.measure.gpu import WorkerPool, outputs_match  # noqa: E402
from nvcc_evo.measure.stats import faster, summarize  # noqa: E402
from nvcc_evo.resolve import load  # noqa: E402
from nvcc_evo.space import source_defines  # noqa: E402
from nvcc_evo.toolkit import load_toolkit  # noqa: E402
from nvcc_evo.wrapper import find_real_nvcc  # noqa: E402

ACF = ROOT / "kernels" / "nvcc-evo.acf"
TORCH_GEMM = """
import torch, sys
n = int(sys.argv[1]); torch.backends.cuda.matmul.allow_tf32 = False
a, b = (torch.rand(n, n, device="cuda") * 2 - 1 for _ in range(2))
for _ in range(3): a @ b
start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
times = []
for _ in range(20):
    start.record(); a @ b; end.record(); end.synchronize(); times.append(start.elapsed_time(end))
times.sort(); print(2 * n ** 3 / (times[len(times) // 2] / 1e3))
"""


def cublas_flops(n: int) -> float | None:
    try:
        out = subprocess.run([sys.executable, "-c", TORCH_GEMM, str(n)], capture_output=True, text=True, timeout=300)
        return float(out.stdout.strip().splitlines()[-1])
    except (OSError, ValueError, IndexError, subprocess.SubprocessError):
        return None


def build(toolkit, source: Path, settings: dict, arch: str):
    flags = plan_flags(settings, CallFacts({}, False, False, False), toolkit).flags
    job = CompileJob(toolkit.nvcc, ("-c", source.name), str(source.parent), source.name, arch, flags)
    result = compile_candidate(job)
    if not result.ok:
        raise RuntimeError(f"{source.name}: {result.stderr[-500:]}")
    return result.cubin


def bench_unit(pool, toolkit, unit, arch: str, rounds: int, copy_rate: float) -> dict:
    source = ACF.parent / unit.globs[0]
    defaults = source_defines(source)
    target = next((t for t in unit.targets if t.arch == arch), None)
    tuned = {s.knob: s.value for s in target.settings} if target else {}
    tuned_defines = {**defaults, **{k[7:]: v for k, v in tuned.items() if k.startswith("define.")}}
    sides = {"default": (build(toolkit, source, {}, arch), plan_bench(unit.bench, defaults)),
             "tuned": (build(toolkit, source, tuned, arch), plan_bench(unit.bench, tuned_defines))}
    samples = {"default": [], "tuned": []}
    for _ in range(rounds):
        for side, (cubin, plan) in sides.items():
            answer = pool.request({"cubin": cubin, "plan": plan, "time": True, "min_seconds": 0.2})
            samples[side].append(summarize(answer["times_us"]).median)
    energy = {side: pool.request({"cubin": c, "plan": p, "energy": True}) for side, (c, p) in sides.items()}
    fresh = {side: pool.request({"cubin": c, "plan": p, "outputs": True, "seed": 77}) for side, (c, p) in sides.items()}
    wrong = outputs_match(fresh["tuned"]["outputs"], fresh["default"]["outputs"], sides["tuned"][1])
    verdict = faster(samples["default"], samples["tuned"])
    row = {"kernel": unit.globs[0], "tuned_knobs": tuned, "correct": not wrong, "problem": wrong,
           "p_value": verdict.p_value, "speedup": verdict.effect, "significant": verdict.significant,
           "evaluations": target.record("evaluations").value if target and target.record("evaluations") else 0}
    for side in sides:
        s = summarize(samples[side])
        row[side] = {"median_us": s.median, "p20_us": s.p20, "p80_us": s.p80,
                     "energy_mj": energy[side].get("energy_mj"), "power_w": energy[side].get("power_w")}
        plan = sides[side][1]
        row[side]["bandwidth_fraction"] = plan.bytes_moved / (s.median * 1e-6) / copy_rate
    return row


def markdown(rows: list[dict], gpu: dict, copy_rate: float, gemm_rate: float | None, toolkit) -> str:
    lines = [f"GPU {gpu['name']} (sm {gpu['cc']}), driver {gpu['driver']}, CUDA {toolkit.version}; "
             f"copy bandwidth {copy_rate / 1e12:.2f} TB/s" + (f", cuBLAS fp32 {gemm_rate / 1e12:.1f} TFLOP/s"
                                                             if gemm_rate else ""), "",
             "| kernel | default us (p20-p80) | tuned us (p20-p80) | speedup | p | energy mJ default/tuned | "
             "ceiling (tuned) | evals | tuned knobs |", "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        d, t = r["default"], r["tuned"]
        ceiling = r.get("ceiling", f"{t['bandwidth_fraction']:.0%} of copy bw")
        knobs = " ".join(f"{k}={v}" for k, v in r["tuned_knobs"].items()) or "(defaults)"
        verdict = f"{r['speedup']:.3f}x" + ("" if r["significant"] else " (n.s.)") + ("" if r["correct"] else " WRONG")
        lines.append(f"| {r['kernel']} | {d['median_us']:.1f} ({d['p20_us']:.1f}-{d['p80_us']:.1f}) | "
                     f"{t['median_us']:.1f} ({t['p20_us']:.1f}-{t['p80_us']:.1f}) | {verdict} | {r['p_value']:.2g} | "
                     f"{d['energy_mj'] or 0:.1f} / {t['energy_mj'] or 0:.1f} | {ceiling} | {r['evaluations']} | {knobs} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default=str(ROOT / "build" / "bench"))
    parser.add_argument("--rounds", type=int, default=10)
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    toolkit = load_toolkit(find_real_nvcc())
    file = load(ACF)
    pool = WorkerPool()
    try:
        arch = pool.hello["arch"]
        copy_rate = pool.request({"copy": True})["copy_bytes_per_s"]
        gemm_rate = cublas_flops(2048)
        rows = []
        for unit in file.units:
            if unit.bench is None or unit.bench.kernel is None:
                continue
            print(f"bench: {unit.globs[0]}", file=sys.stderr, flush=True)
            row = bench_unit(pool, toolkit, unit, arch, args.rounds, copy_rate)
            if unit.bench.kernel.text == "sgemm" and gemm_rate:
                flops = 2 * 2048 ** 3
                row["ceiling"] = f"{flops / (row['tuned']['median_us'] * 1e-6) / gemm_rate:.0%} of cuBLAS"
            rows.append(row)
    finally:
        pool.close()
    table = markdown(rows, pool.hello, copy_rate, gemm_rate, toolkit)
    (out / "bench.json").write_text(json.dumps({"gpu": pool.hello, "copy_bytes_per_s": copy_rate,
                                                "cublas_flops": gemm_rate, "rows": rows}, indent=1, default=str))
    (out / "bench.md").write_text(table)
    print(table)


if __name__ == "__main__":
    main()
