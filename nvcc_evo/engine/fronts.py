"""The Pareto machinery the engine ranks with: evaluations, constrained
domination, Deb's non-dominated sort and crowding distance, NSGA-II's
environmental selection, the front and its hypervolume.

Constraints use constrained domination (a feasible point beats an
infeasible one; two infeasible points compare by total violation).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable, Sequence

from nvcc_evo.engine.space import Genome
from nvcc_evo.status import Status

INF = math.inf


@dataclass(frozen=True)
class Evaluation:
    """What the engine needs to know about one evaluated genome."""

    genome: Genome
    objectives: tuple[float, ...]      # minimised; inf when the candidate failed
    violation: float = 0.0             # 0 when every constraint holds
    status: Status = Status.OK

    @property
    def feasible(self) -> bool:
        return self.status == Status.OK and self.violation == 0.0


def dominates(a: Evaluation, b: Evaluation) -> bool:
    if a.feasible != b.feasible:
        return a.feasible
    if not a.feasible:
        return a.violation < b.violation
    return all(x <= y for x, y in zip(a.objectives, b.objectives)) and a.objectives != b.objectives


def non_dominated_sort(pop: Sequence[Evaluation]) -> list[list[int]]:
    """Fronts of indices, best first (Deb's fast non-dominated sort)."""
    dominated_by: list[list[int]] = [[] for _ in pop]
    counts = [0] * len(pop)
    for i, a in enumerate(pop):
        for j, b in enumerate(pop):
            if i != j and dominates(a, b):
                dominated_by[i].append(j)
            elif i != j and dominates(b, a):
                counts[i] += 1
    fronts, current = [], [i for i, c in enumerate(counts) if c == 0]
    while current:
        fronts.append(current)
        following = []
        for i in current:
            for j in dominated_by[i]:
                counts[j] -= 1
                if counts[j] == 0:
                    following.append(j)
        current = following
    return fronts


def crowding_distance(pop: Sequence[Evaluation], front: list[int]) -> dict[int, float]:
    distance = {i: 0.0 for i in front}
    if len(front) <= 2:
        return {i: INF for i in front}
    for m in range(len(pop[front[0]].objectives)):
        ordered = sorted(front, key=lambda i: pop[i].objectives[m])
        low, high = pop[ordered[0]].objectives[m], pop[ordered[-1]].objectives[m]
        distance[ordered[0]] = distance[ordered[-1]] = INF
        if not math.isfinite(high - low) or high == low:
            continue
        for before, at, after in zip(ordered, ordered[1:], ordered[2:]):
            distance[at] += (pop[after].objectives[m] - pop[before].objectives[m]) / (high - low)
    return distance


def survivors(pop: Sequence[Evaluation], k: int) -> list[Evaluation]:
    """The k best by rank, then crowding distance (NSGA-II's environmental selection)."""
    chosen: list[Evaluation] = []
    for front in non_dominated_sort(pop):
        if len(chosen) + len(front) <= k:
            chosen.extend(pop[i] for i in front)
            continue
        distance = crowding_distance(pop, front)
        ordered = sorted(front, key=lambda i: -distance[i])
        chosen.extend(pop[i] for i in ordered[: k - len(chosen)])
        break
    return chosen


def pareto_front(evaluations: Iterable[Evaluation]) -> list[Evaluation]:
    pool = [e for e in evaluations if e.feasible]
    if not pool:
        return []
    unique = list({e.objectives: e for e in pool}.values())
    return sorted((unique[i] for i in non_dominated_sort(unique)[0]), key=lambda e: e.objectives)



def hypervolume_2d(front: Sequence[tuple[float, float]], reference: tuple[float, float]) -> float:
    """Area dominated by a two-objective front, up to a reference point."""
    points = sorted(p for p in front if p[0] < reference[0] and p[1] < reference[1])
    area, last_y = 0.0, reference[1]
    for x, y in points:
        if y < last_y:
            area += (reference[0] - x) * (last_y - y)
            last_y = y
    return area
