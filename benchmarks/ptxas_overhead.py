"""The drop-in ptxas's overhead: the real ptxas and nvcc-evo-ptxas run in turn
on the same PTX (a small kernel: the fixed cost dominates), with no ACF,
with an ACF whose kernel units name no kernel of it, and with one that
tunes it (the same flags then given to the real ptxas by hand, so only our
own work differs). Prints median wall times and the differences.

    .venv/bin/python benchmarks/ptxas_overhead.py [--runs 25]
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SHIM = Path(sys.executable).parent / "nvcc-evo-ptxas"
SHIM = SHIM if SHIM.exists() else Path(shutil.which("nvcc-evo-ptxas") or SHIM)
OTHER = 'acf 1\nunit kernel "not_this_one*" {\n    target sm_90a {\n        ptxas.opt_level = 1\n    }\n}\n'
TUNED = OTHER.replace("not_this_one*", "*")


def timed(argv: list[str], cwd: Path, env: dict) -> float:
    start = time.perf_counter()
    subprocess.run(argv, cwd=cwd, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=25)
    args = parser.parse_args()
    real = shutil.which("ptxas")
    with tempfile.TemporaryDirectory() as folder:
        work = Path(folder)
        subprocess.run(["nvcc", "-ptx", "-arch=sm_90a", str(ROOT / "tests/data/cuda/regs.cu"), "-o",
                        str(work / "k.ptx")], check=True)
        env = {k: v for k, v in os.environ.items() if not k.startswith("NVCC_EVO_")}
        env.update(NVCC_EVO_REAL_PTXAS=real, XDG_CACHE_HOME=str(work / "cache"))
        tail = ["-v", "--gpu-name=sm_90a", "k.ptx", "-o", "k.cubin"]
        cases = [("no ACF", None, [real, *tail], [str(SHIM), *tail]),
                 ("ACF naming other kernels", OTHER, [real, *tail], [str(SHIM), *tail]),
                 ("ACF tuning it (-O1)", TUNED, [real, "-O1", *tail], [str(SHIM), *tail])]
        print(f"{'case':28} {'ptxas ms':>9} {'nvcc-evo-ptxas ms':>18} {'added ms':>9}")
        for name, acf, plain, ours in cases:
            if acf is not None:
                (work / "nvcc-evo.acf").write_text(acf)
            timed(ours, work, env)                         # warm the probe caches, as any later run finds them
            a, b = [], []
            for _ in range(args.runs):
                a.append(timed(plain, work, env))
                b.append(timed(ours, work, env))
            ma, mb = statistics.median(a) * 1e3, statistics.median(b) * 1e3
            print(f"{name:28} {ma:9.1f} {mb:18.1f} {mb - ma:9.1f}")
        starts = [timed([sys.executable, "-c", "pass"], work, env) for _ in range(args.runs)]
        print(f"(this Python's own start, `python -c pass`: {statistics.median(starts) * 1e3:.1f} ms)")


if __name__ == "__main__":
    main()
