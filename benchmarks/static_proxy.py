"""How well the static objectives (what `make tune` optimises without a GPU)
predict runtime, from the H200 search records: per kernel, the Spearman rank
correlation of runtime with registers and with SASS instructions over every
candidate measured, and the runtime of the fewest-register candidate (no
spills) against the fastest one. Only measurements of each kernel's source as
it is now.

    .venv/bin/python benchmarks/static_proxy.py [benchmarks/data/h200-search.jsonl]
"""
from __future__ import annotations

import sys
from pathlib import Path

from scipy.stats import spearmanr

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from bench import gpu_records  # noqa: E402


def _rho(runtime: list[float], values: list[float]) -> str:
    """Spearman's rho as text; "n/a" where every candidate has the same value."""
    if len(set(values)) < 2:
        return "n/a (all equal)"
    return f"{spearmanr(runtime, values)[0]:+.2f}"


def main() -> None:
    path = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "benchmarks" / "data" / "h200-search.jsonl"
    by_unit: dict[str, dict] = {}
    for name, record in gpu_records((path,)):
        by_unit.setdefault(name, {}).setdefault(record.genome, dict(record.measurement.metrics))
    print("| kernel | candidates | rho(runtime, registers) | rho(runtime, instructions) | fastest | fewest registers |")
    print("|---|---|---|---|---|---|")
    for unit, found in sorted(by_unit.items()):
        points = list(found.values())
        runtime = [p["runtime"] for p in points]
        rho = {k: _rho(runtime, [p[k] for p in points]) for k in ("registers", "instructions")}
        fastest = min(points, key=lambda p: p["runtime"])
        lean = min((p for p in points if p.get("spills", 0) == 0), key=lambda p: (p["registers"], p["runtime"]))
        print(f"| {unit} | {len(points)} | {rho['registers']} | {rho['instructions']} | "
              f"{fastest['runtime']:.1f} us, {fastest['registers']:.0f} regs | {lean['runtime']:.1f} us, "
              f"{lean['registers']:.0f} regs ({lean['runtime'] / fastest['runtime']:.2f}x the fastest) |")


if __name__ == "__main__":
    main()
