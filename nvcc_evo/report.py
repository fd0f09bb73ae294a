"""The end-of-retune table: per unit and target, baseline against tuned for
each objective, and the Pareto front when there are several objectives."""
from __future__ import annotations


def _cell(value: float) -> str:
    return "failed" if value == float("inf") else f"{value:.5g}"


def _change(before: float, after: float) -> str:
    if before in (0, float("inf")) or after == float("inf"):
        return "" if before == after else "-"
    return f"{(after - before) / before * 100:+.1f}%"


def render(outcomes) -> str:
    rows = [("unit", "target", "objective", "baseline", "tuned", "change")]
    for o in outcomes:
        extra = tuple(m for m in ("runtime", "energy", "power") if m in dict(o.baseline.metrics))
        for metric in dict.fromkeys(o.goal.minimize + extra + ("registers", "spills", "instructions")):
            before, after = o.baseline.get(metric), o.chosen_measurement.get(metric)
            rows.append((str(o.task.unit), o.task.arch, metric, _cell(before), _cell(after), _change(before, after)))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    for o in outcomes:
        t = o.evaluator.tally
        lines.append("")
        lines.append(f"{o.task.unit} [{o.task.arch}]: {o.verdict}")
        lines.append(f"  chosen: {o.chosen}")
        spreads = [f"{m} +- {o.baseline.get(m) * s:.3g} / +- {o.chosen_measurement.get(m) * t:.3g}"
                   for m, s in o.baseline.spreads for n, t in o.chosen_measurement.spreads if n == m]
        if spreads:
            lines.append("  spread (p20..p80, baseline / tuned): " + "; ".join(spreads))
        if "stats" in o.extra:
            lines.append(f"  verification: {o.extra['stats']}")
        lines.append(f"  {t.evaluated} evaluated, {t.resumed} resumed from the store, {t.reused} same binary "
                     f"as an earlier candidate (measurement reused), {t.failed} failed; "
                     f"{o.progress.generation} generations, {o.progress.elapsed():.0f} s"
                     + ("; written to the ACF" if o.written else ""))
        if len(o.goal.minimize) > 1:
            lines.append("  Pareto front (" + ", ".join(o.goal.minimize) + "):")
            for point in o.front:
                lines.append("    " + "  ".join(_cell(v) for v in point.objectives) + f"   {point.genome}")
    return "\n".join(lines) + "\n"
