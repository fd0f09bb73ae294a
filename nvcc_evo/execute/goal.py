"""What a search minimises, what must hold, and how one point is picked: a
unit's tune block limited to what its backend measures (`goal_for`), each
condition's distance from holding (`holds`, 0 where it does)."""
from __future__ import annotations

import math
from typing import Mapping
from dataclasses import dataclass

from nvcc_evo.acf import model
from nvcc_evo.measure.static import KERNEL_WARPS

STATIC_DEFAULT = ("spills", "registers")


@dataclass(frozen=True)
class Goal:
    """What to minimise, what must hold, and how to pick one point."""

    minimize: tuple[str, ...]
    require: tuple[model.Condition, ...] = ()
    select: str = ""
    select_where: tuple[model.Condition, ...] = ()
    note: str = ""
    maximize: tuple[str, ...] = ()     # of the objectives, those where higher is better (scored
                                       # negated)
    # No kernel's registers may allow fewer warps per SM than the baseline's (a speed-safe static
    # search: retune.search.speedsafe; the unit's worst kernel alone is `register_warps`).
    kernels_keep_warps: bool = False

    def __str__(self) -> str:
        named = ", ".join(f"{m} (maximized)" if m in self.maximize else m for m in self.minimize)
        return "minimize " + named + (f" ({self.note})" if self.note else "")

    def scores(self, metrics: dict) -> tuple[float, ...]:
        """The objectives as the search minimises them."""
        return tuple(-metrics.get(m, -math.inf) if m in self.maximize else metrics.get(m, math.inf)
                     for m in self.minimize)

    def values(self, scores: tuple[float, ...]) -> tuple[float, ...]:
        """Scores as the metrics' own values (a maximised one is scored negated), for people."""
        return tuple(-s if m in self.maximize else s for m, s in zip(self.minimize, scores))

    def better(self, metric: str, after: float, before: float) -> bool:
        return after > before if metric in self.maximize else after < before

    def violation(self, metrics: Mapping[str, float], baseline: Mapping[str, float]) -> float:
        """How far from feasible: the requires' distances, and (kernels_keep_warps) one for each
        kernel whose registers allow fewer warps per SM than they do in the baseline."""
        broken = sum(holds(c, metrics, baseline) for c in self.require)
        if self.kernels_keep_warps:
            broken += sum(1 for k, v in metrics.items() if k.startswith(KERNEL_WARPS) and
                          v < baseline.get(k, v))
        return broken


def goal_for(tune: model.Tune | None, available: tuple[str, ...], primary: tuple[str, ...] = (),
             maximize: tuple[str, ...] = ()) -> Goal:
    """The unit's tune block, limited to what the backend can measure;
    without one, the backend's primary objectives (a bench command's first
    metric), else registers and spills."""
    wanted = tune.minimize if tune and tune.minimize else ()
    usable = tuple(m for m in wanted if m in available)
    note = ""
    if not usable:
        usable = primary or tuple(m for m in STATIC_DEFAULT if m in available) or available[:1]
        if wanted:
            note = (f"{', '.join(wanted)} cannot be measured here; tuning {', '.join(usable)} "
                    "instead")
    require = tuple(c for c in (tune.require if tune else ()) if c.metric in available)
    select = tune.select if tune and tune.select in usable else usable[0]
    where = tuple(c for c in (tune.select_where if tune else ()) if c.metric in available)
    return Goal(usable, require, select, where, note, tuple(m for m in usable if m in maximize))


def holds(condition: model.Condition, metrics: Mapping[str, float],
          baseline: Mapping[str, float]) -> float:
    """How far `metrics` is from meeting the condition (0: it holds)."""
    value = metrics.get(condition.metric, math.inf)
    bound = condition.bound
    if condition.relative:
        bound *= baseline.get(condition.metric, math.inf)
    if condition.op in ("<=", "<"):
        gap = value - bound
        return max(0.0, gap) + (1e-9 if condition.op == "<" and gap == 0 else 0.0)
    if condition.op in (">=", ">"):
        gap = bound - value
        return max(0.0, gap) + (1e-9 if condition.op == ">" and gap == 0 else 0.0)
    return abs(value - bound)
