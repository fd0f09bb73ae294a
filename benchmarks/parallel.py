"""Search throughput against the number of workers: the kernel suite (a
copy of kernels/ and its ACF, every unit, or those --units names, retuned
from an empty results store with one seed and budget), serial against N
workers on this machine and on a local Ray, and several searches at once,
side by side in one run.

    .venv/bin/python benchmarks/parallel.py --workers 2 --evaluations 12 --out out/parallel
    python3 benchmarks/parallel.py --backend pycuda --workers 16 --no-ray --at-once 2,4 \
        --units scale.cu,reduce_sum.cu,softmax.cu,rmsnorm.cu          # on a GPU

Rows: `serial` (one compile at a time: --jobs 1; static only), `local` (--jobs N: N
compiles at once, measured in one lane, the plain path), `ray local:1` and
`ray local:N` (--cluster: compile tasks on a local Ray of that many
workers; the static measurement in the driver), `K at once` (--jobs N
--at-once K: K searches sharing the N compile slots and the GPU; and on
the local Ray of N workers). Distinct
binaries per minute are the stored evaluations whose SASS was new (not the
same binary as an earlier candidate) over the retune's wall time (Ray's
start included). With the static backend every row's records and choices
are compared with the first row's: it is deterministic, so they must be
the same (`same as serial`); GPU timings are not (`-`).
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from nvcc_evo import backends  # noqa: E402
from nvcc_evo.execute.store import Store  # noqa: E402

COPIED = ("*.cu", "*.cuh", "*.h", "*.py", "nvcc-evo.acf")


def project(out: Path, name: str) -> Path:
    folder = out / name
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    for pattern in COPIED:
        for path in (ROOT / "kernels").glob(pattern):
            shutil.copy(path, folder / path.name)
    return folder


def evo_command() -> list[str]:
    """The installed nvcc-evo beside this Python, else the package from the source tree."""
    evo = Path(sys.executable).parent / "nvcc-evo"
    return [str(evo)] if evo.exists() else [sys.executable, "-m", "nvcc_evo"]


def retune(folder: Path, evaluations: int, seed: int, extra: list[str], backend: str = "static",
           units: list[str] = ()) -> tuple[float, str]:
    command = [*evo_command(), "--retune", "--all", "--acf", str(folder / "nvcc-evo.acf"), "--backend", backend,
               "--evaluations", str(evaluations), "--seed", str(seed), "--progress", "lines", *units, *extra]
    started = time.monotonic()
    done = subprocess.run(command, cwd=folder, capture_output=True, text=True)
    seconds = time.monotonic() - started
    (folder / "retune.log").write_text(done.stderr + done.stdout)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed ({done.returncode}); see {folder / 'retune.log'}")
    return seconds, done.stdout


def outcome(folder: Path) -> tuple:
    """The records without their timings, and the ACF's target blocks without provenance."""
    records = sorted((r.context.unit, repr(r.genome), r.measurement.status, r.sass_hash,
                      tuple((k, v) for k, v in r.measurement.metrics if k != "compile_time"))
                     for r in Store(folder / ".nvcc-evo" / "results.jsonl").read())
    text = (folder / "nvcc-evo.acf").read_text()
    kept = [line for line in text.splitlines() if "=" in line and "provenance" not in line]
    chosen = [line.strip() for line in kept if line.strip().startswith(("define.", "ptxas.", "nvcc."))]
    return records, chosen


def distinct(folder: Path) -> int:
    return len({r.sass_hash or repr(r.genome) for r in Store(folder / ".nvcc-evo" / "results.jsonl").read()})


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--evaluations", type=int, default=12)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--out", type=Path, default=ROOT / "out" / "parallel")
    parser.add_argument("--no-ray", action="store_true", help="the rows without Ray only")
    parser.add_argument("--backend", choices=("static", "pycuda"), default="static")
    parser.add_argument("--units", default="", help="the units retuned, by glob (default: every one)")
    parser.add_argument("--at-once", default="", help="rows of K searches at once: K,K,...")
    args = parser.parse_args()
    n = args.workers
    units = [u for u in args.units.split(",") if u]
    # Compiler facts are the same on any machine: every row's outcome is compared with the serial one.
    same_answers = backends.row(args.backend).facts_only
    rows = [("serial", ["--jobs", "1"])] if same_answers else []
    rows += [(f"local, {n} compiles", ["--jobs", str(n)])]
    if not args.no_ray:
        rows += [("ray local:1", ["--cluster", "local:1"]), (f"ray local:{n}", ["--cluster", f"local:{n}"])]
    for k in (k for k in args.at_once.split(",") if k):
        rows.append((f"{k} at once, {n} compiles", ["--jobs", str(n), "--at-once", k]))
        if not args.no_ray:
            rows.append((f"ray local:{n}, {k} at once", ["--cluster", f"local:{n}", "--at-once", k]))
    warm = project(args.out, "warm-up")          # the toolkit's probe, cached before any row is timed
    subprocess.run([*evo_command(), "--retune", "--dry-run", "--acf", str(warm / "nvcc-evo.acf"), "--backend",
                    "static"], cwd=warm, capture_output=True)
    if backends.row(args.backend).needs_gpu:     # the GPU's comparison kernels, compiled and cached once
        retune(warm, 1, args.seed, [], args.backend, units[:1] or ["scale.cu"])
    results = []
    for name, extra in rows:
        folder = project(args.out, name.replace(" ", "_").replace(",", "").replace(":", ""))
        seconds, _ = retune(folder, args.evaluations, args.seed, extra, args.backend, units)
        results.append((name, folder, seconds))
        print(f"{name}: {seconds:.1f} s", file=sys.stderr)
    serial = outcome(results[0][1])
    print(f"kernel suite ({len(set(r[0] for r in serial[0]))} units), {args.backend} backend, --evaluations "
          f"{args.evaluations} --seed {args.seed}, {os.cpu_count()} CPU cores\n")
    print("| run | wall s | distinct binaries | binaries/min | vs serial | same as serial |")
    print("|---|---|---|---|---|---|")
    base = distinct(results[0][1]) / results[0][2]
    for name, folder, seconds in results:
        count = distinct(folder)
        rate = count / seconds
        print(f"| {name} | {seconds:.1f} | {count} | {rate * 60:.1f} | {rate / base:.2f}x | "
              f"{('yes' if outcome(folder) == serial else 'NO') if same_answers else '-'} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
