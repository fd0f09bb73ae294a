"""The command backend's confirmation: the winner and the baseline rebuilt by
the project's command and run in turn (A B, B A, ...), sequentially: it
stops once the verdict is clear (stats.judged_clear), or when the search's
deadline holds no time for another round past the least; judged by the
primary metric with the GPU backend's rule (stats.judged)."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Callable

from nvcc_evo.acf.bench import command as benchcommand
from nvcc_evo.measure.command.run import Runner, tail
from nvcc_evo.measure.stats import Verdict, a_speed, judged, judged_clear
from nvcc_evo.system.clock import Deadline

SIDES = ("baseline", "chosen")


def interleaved(runner: Runner, command: str, rounds: int, sides: dict,
                candidate_acf: Callable[..., Path], flags_for: Callable,
                deadline: Deadline) -> tuple[Verdict, str]:
    """The verdict of up to `rounds` rounds of `sides` (baseline, chosen: genomes) run in turn with
    `command`, and what failed ("" when nothing did: a failed run ends the confirmation)."""
    samples: dict[str, list[float]] = {side: [] for side in SIDES}
    maximized = any(m.maximize for m in runner.unit.bench.metrics if m.name == runner.primary)
    for index in range(rounds):
        for side in SIDES if index % 2 == 0 else SIDES[::-1]:
            genome = sides[side]
            acf = candidate_acf(genome)
            runner.clock.use(genome)
            try:
                run = runner.run(command, acf, flags_for(genome), "confirm", must_build=True)
            finally:
                acf.unlink(missing_ok=True)
            if not run.ok:
                who = "baseline" if side == "baseline" else "chosen candidate"
                problem = (f"the {who}'s confirmation run {index + 1} of {rounds} "
                           f"{run.failure or run.status}")
                runner.say(f"{runner.unit}: {problem}; the last lines:\n{tail(run.detail)}")
                return verdict(runner, samples), problem
            samples[side].append(run.value(runner.primary))
        if judged_clear(samples, rounds, benchcommand.LEAST_ROUNDS, maximized):
            break              # sequential: the verdict will not change with more rounds
        if index + 1 >= benchcommand.LEAST_ROUNDS and deadline.left() < runner.round_cost():
            runner.say(f"{runner.unit}: confirmation ends after {index + 1} of {rounds} rounds: no "
                       "time left for another")
            break
    return verdict(runner, samples), ""


def verdict(runner: Runner, samples: dict[str, list[float]]) -> Verdict:
    """The primary metric's verdict (stats.judged), named where it is not a time or a rate."""
    metric = next(m for m in runner.unit.bench.metrics if m.name == runner.primary)
    found = judged(samples, metric.maximize)
    if a_speed(metric.name, metric.unit, metric.maximize):
        return found
    return replace(found, judged=metric.name)
