"""The injected run's overhead and the harness-free metric's noise, on one program.

Runs COMMAND plain and with nvcc-evo's injection library in turn (P I, I P,
...) --runs times each, in FOLDER, after a warm-up run of each (not counted:
the first run pays for caches a program fills, Triton's, the driver's). Prints the medians of the wall times and
their ratio (the run must stay within 1.2x), and the relative spread
(p20..p80 over the median) of three metrics of the same injected runs: the
program's own printed figure (--metric REGEX, its first group), the GPU
time of every recorded kernel, and that of the kernels of the --unit
symbols file (one mangled name a line; default: the hottest kernel alone).

    python3 benchmarks/hot/overhead.py --runs 7 --folder /tmp/work/app \\
        --metric 'time ([0-9.]+) ms' -- ./app 2048 20
"""
from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np


def spread(values: list[float]) -> float:
    p20, median, p80 = np.percentile(values, [20, 50, 80])
    return float((p80 - p20) / median) if median else float("nan")


def one_run(command: list[str], folder: str, env: dict) -> tuple[float, str]:
    started = time.monotonic()
    done = subprocess.run(command, cwd=folder, env=env, capture_output=True, text=True)
    seconds = time.monotonic() - started
    if done.returncode != 0:
        sys.exit(f"{command}: exit {done.returncode}\n{done.stderr[-2000:]}")
    return seconds, done.stdout


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--folder", default=".")
    parser.add_argument("--metric", help="the program's own figure: a regex whose first group is the number")
    parser.add_argument("--out", help="a JSON file of every run")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    from nvcc_evo.measure.profile.library import library
    from nvcc_evo.measure.profile.records import environment, read_run
    lib = library(os.environ, "nvcc")
    plain, injected, figure, every, hottest = [], [], [], [], []
    hot_name = None
    one_run(command, args.folder, dict(os.environ))                 # (the warm-up runs)
    with tempfile.TemporaryDirectory() as times:
        one_run(command, args.folder, {**os.environ, **environment(times, lib)})
    for index in range(args.runs):
        for side in ("plain", "injected") if index % 2 == 0 else ("injected", "plain"):
            if side == "plain":
                plain.append(one_run(command, args.folder, dict(os.environ))[0])
                continue
            with tempfile.TemporaryDirectory() as times:
                seconds, output = one_run(command, args.folder, {**os.environ, **environment(times, lib)})
                rows, problems = read_run(times)
            injected.append(seconds)
            if args.metric:
                found = re.search(args.metric, output)
                figure.append(float(found.group(1)) if found else float("nan"))
            if not rows:
                sys.exit(f"{command}: no kernel recorded ({'; '.join(problems) or 'no process wrote its times'})")
            hot_name = hot_name or rows[0].name
            every.append(sum(r.total_ns for r in rows) / 1e6)
            hottest.append(sum(r.total_ns for r in rows if r.name == hot_name) / 1e6)
            if problems:
                print("\n".join(problems), file=sys.stderr)
    ratio = statistics.median(injected) / statistics.median(plain)
    print(f"wall s: plain median {statistics.median(plain):.3f} (spread {spread(plain):.2%}), injected "
          f"{statistics.median(injected):.3f} (spread {spread(injected):.2%}): overhead x{ratio:.3f} "
          f"({'within' if ratio <= 1.2 else 'OVER'} 1.2x)")
    if figure:
        print(f"the program's figure: median {statistics.median(figure):.4g}, spread {spread(figure):.2%}")
    print(f"every kernel's GPU time: median {statistics.median(every):.4g} ms, spread {spread(every):.2%}")
    print(f"the hottest kernel ({hot_name}): median {statistics.median(hottest):.4g} ms, spread {spread(hottest):.2%}")
    if args.out:
        with open(args.out, "w") as handle:
            json.dump({"command": command, "plain_s": plain, "injected_s": injected, "figure": figure,
                       "every_ms": every, "hottest_ms": hottest, "hottest": hot_name, "ratio": ratio}, handle)


if __name__ == "__main__":
    main()
