"""What ships is what was measured, on a GPU: kernels/softmax.cu built by a
project as a cubin (`nvcc-evo -arch=sm_90 -cubin softmax.cu -o softmax.cubin`),
retuned over ptxas 13.3's control files (`ptxas.version` x `ptxas.controls`),
rebuilt by the same command; then the shipped cubin and the default one timed
in turn by benchmarks/interleave.py, each run its own process
(`shipped_cubin.py --time CUBIN`).

    NVCC_EVO_PTXAS=/path/to/ptxas-13.3 python3 benchmarks/shipped_cubin.py --controls DIR --out OUT

Prints the search's own claim (provenance) and the interleaved ratio last.
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from softmax_bench import BENCH  # noqa: E402  (beside this script)

EVO = [sys.executable, "-m", "nvcc_evo"]
BUILD = ["-arch=sm_90", "-cubin", "softmax.cu", "-o"]


# --space full: the kernel's own parameters and ptxas knobs beside the controls (a -cubin build takes them all)
FULL = """        define.BLOCK in {128, 256, 512, 1024}
        define.VEC in {1, 2, 4}
        define.ITEMS in {1, 2, 4, 8}
        ptxas.dlcm in {ca, cg, cs}
        ptxas.opt_level in 1..3
"""


def prepare(folder: Path, controls: list[Path], full: bool = False) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name in ("softmax.cu", "block_reduce.cuh", "references.py"):
        shutil.copy(ROOT / "kernels" / name, folder / name)
    for path in controls:
        shutil.copy(path, folder / path.name)
    names = ", ".join(f'"{p.name}"' for p in controls)
    (folder / "nvcc-evo.acf").write_text(
        f'acf 1\nunit "softmax.cu" {{\n    pin nvcc.use_fast_math = false\n    search {{\n'
        f'        ptxas.version in {{toolkit, "13.3"}}\n        ptxas.controls in {{none, {names}}}\n'
        f'{FULL if full else ""}    }}\n'
        f"    tune {{\n        minimize runtime\n    }}\n{BENCH}\n}}\n")
    return folder / "nvcc-evo.acf"


def run(argv: list[str], cwd: Path, log: Path) -> None:
    with open(log, "a") as out:
        done = subprocess.run(argv, cwd=cwd, stdout=out, stderr=subprocess.STDOUT)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed (exit {done.returncode}); see {log}")


def time_cubin(cubin: Path, acf: Path, with_entry: bool) -> None:
    """One process: the bench's plan at the source's defaults (and, for the
    shipped cubin, the defines its sm_90 entry gives), timed on the GPU."""
    from nvcc_evo.acf.bench.spec import plan_bench
    from nvcc_evo.acf.resolve import load
    from nvcc_evo.acf.sources import define_values, source_defines
    from nvcc_evo.measure.pycuda.pool import WorkerPool
    from nvcc_evo.measure.pycuda.pipe import RunRequest
    from nvcc_evo.measure.stats import summarize
    unit = load(acf).units[0]
    entry = {s.knob: s.value for t in unit.targets if with_entry and t.arch == "sm_90" for s in t.settings}
    plan = plan_bench(unit.bench, {**source_defines(acf.parent / "softmax.cu"), **define_values(entry)})
    pool = WorkerPool()
    try:
        answer = pool.request(RunRequest(cubin.read_bytes(), plan, time=True, min_seconds=0.3))
    finally:
        pool.close()
    print(f"median {summarize(answer.times_us).median:.4f} us")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--controls", type=Path, help="folder of ptxas 13.3 control files (*.acf)")
    parser.add_argument("--out", type=Path, default=ROOT / "out" / "shipped")
    parser.add_argument("--evaluations", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--space", choices=("controls", "full"), default="controls",
                        help="controls: ptxas.version x ptxas.controls; full: with the kernel's defines and ptxas knobs")
    parser.add_argument("--time", type=Path, help="time this cubin (one interleaved run)")
    parser.add_argument("--acf", type=Path)
    parser.add_argument("--with-entry", action="store_true", help="launch with the entry's defines (--time)")
    args = parser.parse_args()
    if args.time:
        return time_cubin(args.time, args.acf, args.with_entry)
    acf = prepare(args.out / "project", sorted(args.controls.glob("*.acf")), args.space == "full")
    folder, log = acf.parent, args.out / "log.txt"
    run([*EVO, *BUILD, "default.cubin"], folder, log)              # recorded; no entry yet: the defaults
    run([*EVO, "--retune", "--backend", "pycuda", "--evaluations", str(args.evaluations)], folder, log)
    run([*EVO, *BUILD, "softmax.cubin"], folder, log)               # the project's build, with the entry
    entry = acf.read_text().split("target sm_90", 1)[-1]
    claim = {k: v for k, v in re.findall(r"(baseline\.runtime|tuned\.runtime|verdict|p_value) = ([^\n]+)", entry)}
    timer = f"{sys.executable} {Path(__file__).resolve()} --acf {acf} --time"
    timed = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "interleave.py"), "--rounds", str(args.rounds),
                            "--metric", r"median ([0-9.]+) us", f"{timer} {folder / 'default.cubin'}",
                            f"{timer} {folder / 'softmax.cubin'} --with-entry"], capture_output=True, text=True)
    settings = entry.split("provenance", 1)[0]
    print(f"entry written:{settings.rstrip()}")
    print(f"the search's claim: {claim}")
    print(timed.stdout + timed.stderr[-2000:])


if __name__ == "__main__":
    main()
