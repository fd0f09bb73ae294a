"""Search throughput: distinct binaries per minute and time to 95% of the
best, the fast protocol against the full one (racing, energy only when
named, PTX reuse, compiles running ahead, requires: all off), side by side
in one run.

    python3 benchmarks/throughput.py --out out/throughput            # on a GPU (pycuda)
    python3 benchmarks/throughput.py --static --out out/throughput   # no GPU: the static backend

Each kernel is retuned twice from an empty results store with the same seed
and budget, once per protocol, in a copy of kernels/ holding one unit
(`minimize runtime`, so that both protocols chase the same objective). The
order of the two alternates between kernels, so that a drift of the GPU
does not favour one. The full run's ACF has no `require` lines, as before
they existed; the fast run's excludes the builds that cannot compile or
launch. Figures come from the results store: the search's wall time is from
its first stored evaluation to its last; the best is the lowest fully timed
runtime of either run; "to 95%" is when a run first stored a runtime within
1/0.95 of it.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from statistics import median

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
from softmax_bench import BENCH  # noqa: E402  (beside this script)
SGEMM_SEARCH = """\
    search {
        define.BM in {64, 128, 256}
        define.BN in {64, 128, 256}
        define.BK in {8, 16}
        define.TM in {2, 4, 8}
        define.TN in {2, 4, 8}
        ptxas.maxrregcount in 64..255 step 32
        ptxas.register_usage_level in 0..10
        ptxas.opt_level in 1..3
        ptxas.dlcm in {ca, cg}
REQUIRES    }
"""
# softmax.cu writes a row its tiling does not cover as NaN, on purpose
SOFTMAX_REQUIRES = """\
        require BLOCK * VEC * ITEMS >= 4096
"""
SGEMM_REQUIRES = """\
        require (BM / TM) * (BN / TN) <= 1024
        require (BM * BK) % ((BM / TM) * (BN / TN)) == 0
        require (BK * BN) % ((BM / TM) * (BN / TN)) == 0
"""


PTXAS_SEARCH = """\
    pin define.BM = 64
    pin define.BN = 64
    pin define.BK = 8
    pin define.TM = 8
    pin define.TN = 8
    search {
        ptxas.maxrregcount in 64..255 step 32
        ptxas.register_usage_level in 0..10
        ptxas.opt_level in 1..3
        ptxas.dlcm in {ca, cg}
    }
"""


def sgemm_unit(path: str, size: int, search: str = "SEARCH") -> str:
    return f"""unit "{path}" {{
{search}    tune {{
        minimize runtime
        require spills <= 0
    }}
    bench {{
        kernel sgemm
        reference "references.py:sgemm"
        let M = {size}
        let N = {size}
        let K = {size}
        arg A : f32[M * K] = random(seed=1, low=-1, high=1)
        arg B : f32[K * N] = random(seed=2, low=-1, high=1)
        arg C : f32[M * N] = output
        arg m : i32 = M
        arg n : i32 = N
        arg k : i32 = K
        grid (cdiv(N, BN), cdiv(M, BM))
        block ((BM / TM) * (BN / TN))
        check C rtol 1e-3 atol 1e-2
    }}
}}
"""


SOFTMAX = """unit "softmax.cu" {
    search {
        define.BLOCK in {128, 256, 512, 1024}
        define.VEC in {1, 2, 4}
        define.ITEMS in {1, 2, 4, 8}
        ptxas.dlcm in {ca, cg, cs}
        ptxas.opt_level in 1..3
REQUIRES    }
    tune {
        minimize runtime
    }
""" + BENCH + "\n}\n"

# name -> (the unit's source, the ACF's unit text, a thin source that includes another, or None)
KERNELS = {
    "softmax": ("softmax.cu", SOFTMAX, None),
    "sgemm4096": ("sgemm_regblock.cu", sgemm_unit("sgemm_regblock.cu", 4096), None),
    "sgemm6144": ("sgemm_long.cu", sgemm_unit("sgemm_long.cu", 6144), '#include "sgemm_regblock.cu"\n'),
    # ptxas knobs only: after the first candidate, PTX reuse leaves only ptxas to run
    "sgemm-ptxas": ("sgemm_regblock.cu", sgemm_unit("sgemm_regblock.cu", 4096, PTXAS_SEARCH), None),
}
DEFAULT = {"pycuda": "softmax,sgemm4096,sgemm6144", "static": "sgemm4096,sgemm-ptxas"}


def acf_text(unit: str, protocol: str) -> str:
    fast = protocol == "fast"
    search = SGEMM_SEARCH.replace("REQUIRES", SGEMM_REQUIRES if fast else "")
    return "acf 1\n\n" + unit.replace("SEARCH", search).replace("REQUIRES", SOFTMAX_REQUIRES if fast else "")


def project(folder: Path, kernel: str, protocol: str) -> Path:
    source, unit, thin = KERNELS[kernel]
    folder.mkdir(parents=True)
    for path in (ROOT / "kernels").iterdir():
        if path.suffix in (".cu", ".cuh", ".py"):
            shutil.copy(path, folder / path.name)
    if thin:
        (folder / source).write_text(thin)
    (folder / "nvcc-evo.acf").write_text(acf_text(unit, protocol))
    return folder


def retune(folder: Path, backend: str, protocol: str, args, seed: int) -> dict:
    command = [sys.executable, "-m", "nvcc_evo", "--retune", "--all", "--backend", backend, "--target", "sm_90",
               "--evaluations", str(args.evaluations), "--population", str(args.population), "--patience", "1000",
               "--seed", str(seed)] + (["--full-protocol"] if protocol == "full" else [])
    started = time.monotonic()
    done = subprocess.run(command, cwd=folder, capture_output=True, text=True)
    wall = time.monotonic() - started
    (folder / "retune.out").write_text(done.stdout)
    (folder / "retune.err").write_text(done.stderr)
    store = folder / ".nvcc-evo" / "results.jsonl"
    if not store.exists():
        raise SystemExit(f"the retune in {folder} stored nothing:\n{done.stderr[-2000:]}")
    lines = [json.loads(line) for line in store.read_text().splitlines()]
    return {"rc": done.returncode, "wall": wall, "records": lines,
            "cost": next((line.strip() for line in done.stdout.splitlines() if line.strip().startswith("cost:")), ""),
            "verdict": next((line.split("]: ", 1)[1] for line in done.stdout.splitlines() if "]: " in line), "")}


def figures(run: dict, objective: str, best: float) -> dict:
    records = run["records"]
    first, last = records[0]["time"], records[-1]["time"]
    minutes = max(last - first, 1e-9) / 60
    binaries = {r["sass_hash"] for r in records if r["sass_hash"]}
    failed = {}
    for r in records:
        if r["status"] != "ok":
            failed[r["status"]] = failed.get(r["status"], 0) + 1
    reached = next((r["time"] - first for r in records
                    if r["status"] == "ok" and r["metrics"].get(objective, float("inf")) <= best / 0.95), None)
    return {"evaluations": len(records), "binaries": len(binaries), "seconds": last - first,
            "binaries_per_min": len(binaries) / minutes, "to_95": reached, "failed": failed,
            "best": min((r["metrics"].get(objective, float("inf")) for r in records if r["status"] == "ok"
                         and not r["detail"].startswith("raced:")), default=float("inf")),
            "raced": sum(r["detail"].startswith("raced:") for r in records)}


def fully_timed_best(records: list, objective: str) -> float:
    return min((r["metrics"].get(objective, float("inf")) for r in records
                if r["status"] == "ok" and not r["detail"].startswith("raced:")), default=float("inf"))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="out/throughput")
    parser.add_argument("--evaluations", type=int, default=24)
    parser.add_argument("--population", type=int, default=8)
    parser.add_argument("--seeds", default="1", help="comma-separated seeds: each kernel is retuned with each")
    parser.add_argument("--static", action="store_true", help="the static backend (no GPU): registers, spills")
    parser.add_argument("--kernels", help=f"comma-separated names of {', '.join(KERNELS)} (default: {DEFAULT})")
    args = parser.parse_args()
    out = Path(args.out).resolve()
    shutil.rmtree(out, ignore_errors=True)
    # static: spills are 0 for most of this space; registers show the search moving (the figure is the rate)
    backend, objective = ("static", "registers") if args.static else ("pycuda", "runtime")
    rows, results = [], {}
    kernels = [k for k in KERNELS if k in (args.kernels or DEFAULT[backend]).split(",")]
    seeds = [int(seed) for seed in args.seeds.split(",")]
    for n, (kernel, seed) in enumerate((k, seed) for k in kernels for seed in seeds):
        order = ("full", "fast") if n % 2 == 0 else ("fast", "full")
        runs = {p: retune(project(out / f"{n}-{p}", kernel, p), backend, p, args, seed) for p in order}
        best = min(fully_timed_best(r["records"], objective) for r in runs.values())
        shown = {p: figures(r, objective, best) for p, r in runs.items()}
        results[f"{kernel} seed {seed}"] = {p: {**shown[p], "rc": runs[p]["rc"], "wall": runs[p]["wall"],
                                                "cost": runs[p]["cost"], "verdict": runs[p]["verdict"]}
                                            for p in runs}
        rows.append((kernel, seed, shown["full"], shown["fast"]))
        (out / "throughput.json").write_text(json.dumps(results, indent=1, default=str))   # kept if cut short
    print(table(rows, args, objective))
    if len(seeds) > 1:
        print(summary(rows, objective))
    for name, runs in results.items():
        for protocol, r in runs.items():
            print(f"{name} [{protocol}]: rc {r['rc']}, {r['verdict']}; {r['cost']}")
    return 0


def summary(rows, objective: str) -> str:
    """Per kernel over the seeds: the median ratio of binaries per minute, and
    how the best each protocol found compares (full's best / fast's: above 1,
    fast found a lower one)."""
    lines = [f"| kernel | seeds | binaries/min ratio, median (range) | best {objective} full / fast, "
             f"median (range) |", "|---|---|---|---|"]
    for kernel in dict.fromkeys(row[0] for row in rows):
        mine = [row for row in rows if row[0] == kernel]
        rates = sorted(fast["binaries_per_min"] / full["binaries_per_min"] for _, _, full, fast in mine)
        bests = sorted(full["best"] / fast["best"] for _, _, full, fast in mine)
        lines.append(f"| {kernel} | {len(mine)} | {median(rates):.2f}x ({rates[0]:.2f}-{rates[-1]:.2f}) | "
                     f"{median(bests):.4f} ({bests[0]:.4f}-{bests[-1]:.4f}) |")
    return "\n".join(lines) + "\n"


def _t(value) -> str:
    return "never" if value is None else f"{value:.0f} s"


def table(rows, args, objective: str) -> str:
    head = (f"| kernel | seed | protocol | evaluations | distinct binaries | search s | binaries/min | ratio | "
            f"best {objective} | to 95% of best | not built or refused |\n|---|---|---|---|---|---|---|---|---|---|---|")
    lines = [head]
    for kernel, seed, full, fast in rows:
        for name, f in (("full (old)", full), ("fast (new)", fast)):
            ratio = f["binaries_per_min"] / full["binaries_per_min"] if full["binaries_per_min"] else float("nan")
            failed = ", ".join(f"{k} {v}" for k, v in sorted(f["failed"].items())) or "0"
            lines.append(f"| {kernel} | {seed} | {name} | {f['evaluations']} | {f['binaries']} | {f['seconds']:.0f} | "
                         f"{f['binaries_per_min']:.1f} | {ratio:.2f}x | {f['best']:.5g} | {_t(f['to_95'])} | "
                         f"{failed} |")
    command = " ".join(["python3 benchmarks/throughput.py", *sys.argv[1:]])
    return "\n".join(lines) + f"\n\n(`{command}`; seeds {args.seeds}, {args.evaluations} evaluations, " \
                              f"population {args.population}; {os.cpu_count()} CPUs)\n"


if __name__ == "__main__":
    sys.exit(main())
