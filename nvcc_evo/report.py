"""The end-of-retune table: per unit and target, baseline against tuned for
each objective, and the Pareto front when there are several objectives."""
from __future__ import annotations


def _cell(value: float) -> str:
    return "failed" if value == float("inf") else f"{value:g}"


def _change(before: float, after: float) -> str:
    if before in (0, float("inf")) or after == float("inf"):
        return "" if before == after else "-"
    return f"{(after - before) / before * 100:+.1f}%"


def render(outcomes) -> str:
    rows = [("unit", "target", "objective", "baseline", "tuned", "change")]
    for o in outcomes:
        for metric in dict.fromkeys(o.goal.minimize + ("registers", "spills", "instructions")):
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
        lines.append(f"  {t.evaluated} evaluated, {t.resumed} resumed from the store, {t.reused} same binary "
                     f"as an earlier candidate (measurement reused), {t.failed} failed; "
                     f"{o.progress.generation} generations, {o.progress.elapsed():.0f} s"
                     + ("; written to the ACF" if o.written else ""))
        if len(o.goal.minimize) > 1:
            lines.append("  Pareto front (" + ", ".join(o.goal.minimize) + "):")
            for point in o.front:
                lines.append("    " + "  ".join(_cell(v) for v in point.objectives) + f"   {point.genome}")
    return "\n".join(lines) + "\n"
