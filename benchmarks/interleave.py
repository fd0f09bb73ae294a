"""Two builds of a program timed by its own harness, run in turn (A B, B A, ...).

The independent check of a command-backend retune: no nvcc-evo in the loop,
only the two binaries, each run in its own process, the metric read from
what it prints. Prints the medians, their spreads, the ratio and the
one-sided Mann-Whitney p-value (is B faster than A?).

    python3 benchmarks/interleave.py --rounds 10 \\
        --metric 'block_size +[0-9]+ \\| time ([0-9.]+) ms' --take min \\
        './layernorm_default 3' './layernorm_tuned 3'
"""
from __future__ import annotations

import argparse
import re
import shlex
import statistics
import subprocess
import sys

import numpy as np
from scipy.stats import mannwhitneyu

TAKES = {"first": lambda v: v[0], "last": lambda v: v[-1], "min": min, "max": max, "median": statistics.median}


def one_run(command: str, metric: re.Pattern, take: str, timeout: float) -> float:
    done = subprocess.run(shlex.split(command), capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        sys.exit(f"{command}: exit {done.returncode}\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    values = [float(m.group(1)) for m in metric.finditer(done.stdout)]
    if not values:
        sys.exit(f"{command}: /{metric.pattern}/ not in its output:\n{done.stdout[-2000:]}")
    return TAKES[take](values)


def spread(values: list[float]) -> float:
    p20, median, p80 = np.percentile(values, [20, 50, 80])
    return (p80 - p20) / median


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("a", help="the first build's command (the baseline)")
    parser.add_argument("b", help="the second build's command (the tuned build)")
    parser.add_argument("--metric", required=True, help="a regex whose first group is the number (lower is better)")
    parser.add_argument("--take", default="first", choices=sorted(TAKES))
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--timeout", type=float, default=300)
    args = parser.parse_args(argv)
    metric = re.compile(args.metric)
    samples = {"a": [], "b": []}
    for index in range(args.rounds):
        for side in ("a", "b") if index % 2 == 0 else ("b", "a"):
            samples[side].append(one_run(getattr(args, side), metric, args.take, args.timeout))
    a, b = samples["a"], samples["b"]
    p_value = mannwhitneyu(a, b, alternative="greater").pvalue
    print(f"rounds {args.rounds}, interleaved")
    print(f"A {args.a}: median {statistics.median(a):.5g} (p20..p80 spread {spread(a):.2%}) {a}")
    print(f"B {args.b}: median {statistics.median(b):.5g} (p20..p80 spread {spread(b):.2%}) {b}")
    print(f"A / B = {statistics.median(a) / statistics.median(b):.4f}x, one-sided Mann-Whitney p = {p_value:.3g}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
