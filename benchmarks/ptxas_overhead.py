"""The drop-in ptxas's overhead: the real ptxas and nvcc-evo-ptxas run in turn
on the same PTX (a small kernel: the fixed cost dominates), with no ACF,
with an ACF whose kernel units name no kernel of it, and with one that
tunes it (the same flags then given to the real ptxas by hand, so only our
own work differs). Prints median wall times, the differences and, beside
them, what is left of each after this Python's own start (`python -c
pass`, timed in the same rounds: a loaded machine moves all three alike).
nvcc_evo's bytecode is written first, as an install does (where
PYTHONDONTWRITEBYTECODE is set, a tree run from its sources would compile
them on every call).

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
    import compileall
    import nvcc_evo
    compileall.compile_dir(os.path.dirname(nvcc_evo.__file__), quiet=1)
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
        start = [sys.executable, "-c", "pass"]
        print(f"{'case':28} {'ptxas ms':>9} {'nvcc-evo-ptxas ms':>18} {'added ms':>9} {'python ms':>10} "
              f"{'added - python':>15}")
        for name, acf, plain, ours in cases:
            if acf is not None:
                (work / "nvcc-evo.acf").write_text(acf)
            timed(ours, work, env)                         # warm the probe caches, as any later run finds them
            a, b, c = [], [], []
            for _ in range(args.runs):
                a.append(timed(plain, work, env))
                b.append(timed(ours, work, env))
                c.append(timed(start, work, env))
            ma, mb, mc = (statistics.median(x) * 1e3 for x in (a, b, c))
            print(f"{name:28} {ma:9.1f} {mb:18.1f} {mb - ma:9.1f} {mc:10.1f} {mb - ma - mc:15.1f}")
        print("(python: this Python's own start, `python -c pass`, timed in the same rounds)")


if __name__ == "__main__":
    main()
