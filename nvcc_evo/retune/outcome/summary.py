"""The end-of-retune table: per unit and target, baseline against tuned for
each objective, and the Pareto front when there are several objectives."""
from __future__ import annotations

from typing import TYPE_CHECKING

from nvcc_evo.acf.edit.spelling import show_condition, show_value
from nvcc_evo.execute.goal import holds
from nvcc_evo.kerneldiff.view import change, lines as kernel_lines, notes
from nvcc_evo.retune.outcome.writeback import current_genome, settings_of

if TYPE_CHECKING:
    from nvcc_evo.engine.space import Genome
    from nvcc_evo.retune.outcome.choice import Outcome


def _cell(value: float) -> str:
    return "failed" if value == float("inf") else f"{value:.5g}"


def render(outcomes: list[Outcome]) -> str:
    rows = [("unit", "target", "objective", "baseline", "tuned", "change")]
    for o in outcomes:
        extra = tuple(m for m in ("runtime", "energy", "power") if m in dict(o.baseline.metrics))
        shown = o.goal.minimize + extra + ("registers", "spills", "instructions")
        for metric in dict.fromkeys(shown):
            before, after = o.baseline.get(metric), o.chosen_measurement.get(metric)
            rows.append((str(o.task.unit), o.task.arch, metric, _cell(before), _cell(after),
                         change(before, after)))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    for o in outcomes:
        lines += _summary(o)
    said = notes([o.kernels for o in outcomes])
    return "\n".join(lines + ([""] + said if said else [])) + "\n"


def _summary(o: Outcome) -> list[str]:
    """One unit and target: verdict, choice, counts, its own time, the front."""
    t = o.measured.tally
    lines = ["", f"{o.task.unit} [{o.task.arch}]: {o.verdict}"]
    if o.baseline.ok:
        why = _off_front(o)
        lines.append(f"  chosen: {_written(o)}" + (f"  ({why})" if why else ""))
    spreads = [f"{m} +- {o.baseline.get(m) * s:.3g} / +- {o.chosen_measurement.get(m) * u:.3g}"
               for m, s in o.baseline.spreads
               for n, u in o.chosen_measurement.spreads if n == m]
    if spreads:
        lines.append("  spread (p20..p80, baseline / tuned): " + "; ".join(spreads))
    if o.verification is not None:
        lines.append(f"  verification: {o.verification}")
    if o.drift is not None:
        lines.append(f"  baseline drift: {o.drift:+.2%} (run again after the search)")
    seconds = o.seconds
    plural = "" if o.progress.generation == 1 else "s"
    lines.append(f"  {t.evaluated} evaluated, {t.resumed} resumed from the store, {t.reused} "
                 f"same binary as an earlier candidate (measurement reused), {t.failed} failed; "
                 f"{o.progress.generation} generation{plural}, {seconds:.0f} s"
                 + ("; written to the ACF" if o.written else ""))
    if t.failed:
        lines.append(f"  failures: {t.failures_text()}")
    if o.learned:
        lines.append(f"  avoided: {o.learned}")
    if t.evaluated:
        lines.append(f"  cost: {t.costs_text()}")
    if o.kernels is not None:
        lines += kernel_lines(o.kernels, note=False)
    if len(o.goal.minimize) > 1 and o.front:
        lines.append("  Pareto front (" + ", ".join(o.goal.minimize) + "):")
        for point in o.front:
            scores = "  ".join(_cell(v) for v in o.goal.values(point.objectives))
            lines.append(f"    {scores}   {point.genome}"
                         + ("   <- chosen" if point.genome == o.chosen else ""))
    return lines


def _written(o: Outcome) -> str:
    """The chosen values as the ACF gets them (defaults and pins left out)."""
    shown = lambda settings: " ".join(f"{s.knob}={show_value(s.value)}" for s in settings)
    written = settings_of(o)
    searched = [s for s in written if s.knob not in o.fixed]
    kept = [s for s in written if s.knob in o.fixed]
    if not kept:
        return shown(searched) or "(the toolkit's defaults)"
    # (the entry's knobs outside the search stay: beside "baseline kept" they read as a choice made)
    return ((shown(searched) or "no searched knob moved")
            + f"; kept from the entry, not searched: {shown(kept)}")


def _off_front(o: Outcome) -> str:
    """Why the chosen point is not one of the printed front's, if it is not."""
    if len(o.goal.minimize) < 2 or any(p.genome == o.chosen for p in o.front):
        return ""
    if o.chosen == o.space.baseline():
        rule = _select_rule(o)
        if rule and not any(_meets_rule(o, p.genome) for p in o.front):
            return f"the baseline, not on the front: no front point meets `{rule}`"
        return "the baseline, not on the front: " + o.verdict.removeprefix("baseline kept: ")
    scores = o.goal.scores(dict(o.chosen_measurement.metrics))
    twin = next((p for p in o.front if p.objectives == scores), None)
    if twin is not None:
        return _why_the_twin_lost(o, twin.genome)
    return f"picked by the select rule `{_select_rule(o)}`" if o.goal.select_where else ""


def _why_the_twin_lost(o: Outcome, twin: Genome) -> str:
    """The chosen point and a front point score the same: why this one (choice.choose's tie
    rules)."""
    base = dict(o.space.baseline().items)
    moved = lambda genome: sum(value != base.get(knob) for knob, value in genome.items)
    if o.chosen == current_genome(o.task, o.space):
        return "the same scores as a front point: the unit's current entry, kept"
    if moved(o.chosen) < moved(twin):
        return "the same scores as a front point, with fewer knobs moved from the baseline"
    return (f"the same scores as a front point, as many knobs moved ({moved(o.chosen)}): the first "
            "in a fixed order")


def _select_rule(o: Outcome) -> str:
    where = " and ".join(show_condition(c) for c in o.goal.select_where)
    return f"select {o.goal.select} where {where}" if where else ""


def _meets_rule(o: Outcome, genome: Genome) -> bool:
    metrics = dict(o.measured[genome].metrics)
    return all(holds(c, metrics, o.measured.baseline) == 0 for c in o.goal.select_where)
