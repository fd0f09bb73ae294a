"""Wrapper overhead: nvcc and nvcc-evo run alternately on a real translation
unit, without an ACF and with one (nvcc then gets the same flags by hand, so
only the wrapper's own work differs). Prints median wall times and ratios.
With --against OTHER, a second nvcc-evo (say, an install of an earlier
commit) runs in the same alternation, so two versions are compared side by
side under the same load. The last case adds a project settings file
(nvcc-evo.toml beside the ACF).

    .venv/bin/python benchmarks/wrapper_overhead.py [--runs 15] [--evo PATH] [--against PATH]
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
EVO = Path(sys.executable).parent / "nvcc-evo"
ACF = """acf 1
unit "sgemm_regblock.cu" {
    target sm_90 {
        define.TM = 4
        ptxas.opt_level = 2
    }
}
"""


def timed(argv: list[str], cwd: Path, env: dict) -> float:
    start = time.perf_counter()
    subprocess.run(argv, cwd=cwd, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def compare(label: str, plain: list[str], wrapped: dict[str, list[str]], cwd: Path, env: dict, runs: int) -> None:
    """nvcc and each wrapper alternately, `runs` times; medians and extras."""
    for argv in wrapped.values():
        timed(argv, cwd, env)         # warm: toolkit probe and ACF cache filled once
    a, b = [], {name: [] for name in wrapped}
    for _ in range(runs):
        a.append(timed(plain, cwd, env))
        for name, argv in wrapped.items():
            b[name].append(timed(argv, cwd, env))
    med_a = statistics.median(a)
    for name, times in b.items():
        med_b = statistics.median(times)
        print(f"{label:<10} nvcc {med_a * 1000:8.1f} ms   {name} {med_b * 1000:8.1f} ms   "
              f"ratio {med_b / med_a:6.3f}   extra {(med_b - med_a) * 1000:+6.1f} ms   "
              f"(medians of {runs}; nvcc spread {(max(a) - min(a)) * 1000:.0f} ms)")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--evo", default=str(EVO),
                        help="the nvcc-evo to time (default: this venv's; an editable install adds its finder)")
    parser.add_argument("--against", help="another nvcc-evo, timed in the same alternation")
    args = parser.parse_args()
    evos = {"nvcc-evo": args.evo, **({"against": args.against} if args.against else {})}
    nvcc = shutil.which("nvcc")
    with tempfile.TemporaryDirectory() as work:
        work = Path(work)
        shutil.copy(ROOT / "kernels" / "sgemm_regblock.cu", work)
        env = dict(os.environ, XDG_CACHE_HOME=str(work / "cache"))
        base = ["-arch=sm_90", "-c", "sgemm_regblock.cu", "-o", "out.o"]
        tuned = ["-DTM=4", "-Xptxas", "-O2"]
        dry = ["--dryrun", *base]
        calls = lambda argv: {name: [evo, *argv] for name, evo in evos.items()}
        print("compiling sgemm_regblock.cu (real compile; ratio is what a build sees):")
        compare("no ACF", [nvcc, *base], calls(base), work, env, args.runs)
        (work / "nvcc-evo.acf").write_text(ACF)
        compare("with ACF", [nvcc, *base, *tuned], calls(base), work, env, args.runs)
        print("the same calls with --dryrun (nvcc plans but runs nothing, so the wrapper's own cost stands out):")
        compare("with ACF", [nvcc, *dry, *tuned], calls(dry), work, env, 3 * args.runs)
        (work / "nvcc-evo.acf").unlink()
        compare("no ACF", [nvcc, *dry], calls(dry), work, env, 3 * args.runs)
        (work / "nvcc-evo.acf").write_text(ACF)
        (work / "nvcc-evo.toml").write_text('stale = "keep"\n\n[retune]\nevaluations = 40\n')
        compare("ACF+TOML", [nvcc, *dry, *tuned], calls(dry), work, env, 3 * args.runs)


if __name__ == "__main__":
    main()
