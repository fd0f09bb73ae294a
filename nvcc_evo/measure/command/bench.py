"""The command backend's answer for one unit: a candidate's repeated runs
(the first builds it; `repeat N`, or `LOW..HIGH` adaptive: stats.enough)
summarised, the baseline's drift after the search, the confirmation, and
what the steps after the search are expected to take (`reserve`)."""
from __future__ import annotations

import math
import time
from dataclasses import dataclass
from collections.abc import Hashable
from pathlib import Path
from typing import Callable

from nvcc_evo.acf import model
from nvcc_evo.acf.bench import command as benchcommand
from nvcc_evo.measure import Confirmation, Measurement, failed
from nvcc_evo.measure.command.confirm import interleaved
from nvcc_evo.measure.command.metrics import Run, summary
from nvcc_evo.measure.command.rebuilt import leave_stale
from nvcc_evo.measure.command.run import Runner, tail
from nvcc_evo.measure.stats import Summary, enough, summarize
from nvcc_evo.system.clock import NONE, Deadline

NOISY = 0.05      # a candidate's relative spread over which its progress line shows each run


def _described(metric: model.Metric) -> str:
    """A metric in the backend's words: its name, how it is read, which match, maximized."""
    how = "the unit's kernels' GPU time" if metric.kernels else f"/{metric.regex}/"
    take = f" {metric.take}" if metric.take != "first" else ""
    return f"{metric.name} {how}{take}" + (" maximized" if metric.maximize else "")


@dataclass
class CommandBench:
    """Runs one unit's bench command for its candidates (through `runner`)."""

    runner: Runner
    candidate_acf: Callable[..., Path]  # genome -> Path of a copy of the ACF holding the candidate
    flags_for: Callable                 # genome -> the flags the wrapper must add for it
    best: Summary | None = None         # the primary metric's best (adaptive repeats stop early)
    first: float = 0.0                  # seconds of the first (the baseline's) measurement
    deadline: Deadline = NONE           # the search's, which the confirmation ends by (finish_by)

    @property
    def bench(self) -> model.Bench:
        return self.runner.unit.bench

    @property
    def primary(self) -> str:
        return self.runner.primary

    @property
    def timeout(self) -> float:
        return self.runner.unit.timeout

    @property
    def command(self) -> str:
        """The bench command (resolve: a command backend's bench has one)."""
        assert self.bench.command is not None
        return self.bench.command.text

    @property
    def maximized(self) -> tuple[str, ...]:
        return tuple(m.name for m in self.bench.metrics if m.maximize)

    def describe(self) -> str:
        """The backend in words: the command, its metrics, runs per candidate, a run's timeout."""
        shown = "; ".join(_described(m) for m in self.bench.metrics)
        repeat = self.bench.repeat
        if repeat and repeat.high > repeat.low:
            runs = f"{repeat.low}..{repeat.high} runs"
        else:
            runs = f"{repeat.low if repeat else 1} run(s)"
        return (f"command `{self.command}` ({shown}; {runs} per candidate, "
                f"{self.timeout:g} s a run at most)")

    def measure(self, genome: Hashable, flags: tuple[str, ...],
                phase: str = "search") -> Measurement:
        """`repeat` runs (the first builds), medians and relative spreads."""
        low, high = (self.bench.repeat.low, self.bench.repeat.high) if self.bench.repeat else (1, 1)
        acf = self.candidate_acf(genome)
        self.runner.clock.use(genome)
        started = time.monotonic()
        runs: list[Run] = []
        try:
            while len(runs) < high:
                run = self.runner.run(self.command, acf, flags, phase, must_build=not runs)
                if not run.ok:
                    self.runner.say(f"{self.runner.unit} candidate "
                                    f"{' '.join(flags) or '(baseline)'}: {run.status} after "
                                    f"{run.seconds:.1f} s; the last lines:\n{tail(run.detail)}")
                    return failed(run.status, run.detail)
                runs.append(run)
                if enough([r.value(self.primary) for r in runs], low, high, self.best,
                          self.primary in self.maximized):
                    break
        finally:
            acf.unlink(missing_ok=True)
            self._leave_stale()
        measurement = summary(self.bench, runs, time.monotonic() - started)
        values = [r.value(self.primary) for r in runs]
        self._keep_best(summarize(values))
        self.first = self.first or time.monotonic() - started
        self._note(measurement, flags, values)
        return measurement

    def reserve(self) -> float:
        """Seconds the end drift and the confirmation's least rounds are expected to take, with a
        margin of a fifth: kept back from a time budget (further rounds only as the time left
        allows: `finish_by`)."""
        return 1.2 * (benchcommand.LEAST_ROUNDS * self.runner.round_cost() + self.first)

    def finish_by(self, deadline: Deadline) -> None:   # the steps after the search end by its end
        self.deadline = deadline

    def _keep_best(self, primary: Summary) -> None:
        if self.best is None or (primary.median > self.best.median if self.primary in self.maximized
                                 else primary.median < self.best.median):
            self.best = primary

    def _note(self, measurement: Measurement, flags: tuple[str, ...], values: list[float]) -> None:
        """The progress of a slow search: one line per candidate, with its cost; where its runs
        spread more than NOISY, each run's value of the primary metric too."""
        units = {m.name: m.unit for m in self.bench.metrics}
        spreads = dict(measurement.spreads)
        shown = ", ".join(f"{name} {value:.5g}{(' ' + units[name]) if units.get(name) else ''}"
                          + (f" ±{spreads[name]:.1%}" if name in spreads else "")
                          for name, value in measurement.metrics if name in units)
        count = len(values)
        runs = (f": {', '.join(f'{v:.5g}' for v in values)}"
                if count > 1 and spreads.get(self.primary, 0.0) > NOISY else "")
        self.runner.say(f"{self.runner.unit} {' '.join(flags) or '(baseline)'}: {shown} "
                        f"({count} run{'s' if count > 1 else ''}{runs}, "
                        f"{measurement.get('command_time'):.1f} s)")

    def drift(self, genome: Hashable, first: Measurement) -> float | None:
        """The baseline (`genome`) rebuilt and run again after the search, as
        a candidate is (its `repeat` runs): the relative change of its primary
        metric against `first`, its measurement when the search began; None
        when either has no such metric."""
        before = first.get(self.primary, math.nan)
        if not math.isfinite(before) or before == 0:
            return None
        again = self.measure(genome, self.flags_for(genome), "drift")
        return again.get(self.primary) / before - 1 if again.ok else None

    def confirm(self, baseline: Hashable, chosen: Hashable, build: object = None) -> Confirmation:
        """Winner and baseline (genomes) rebuilt by the project's command and
        run in turn for `confirm rounds` rounds with the confirmation command
        (command.confirm). `build` (the Backend's compile of a genome) is not
        used: the command builds each side itself."""
        spec = self.bench.confirm or model.Confirm()
        rounds = spec.rounds or benchcommand.DEFAULT_ROUNDS
        command = spec.command or self.command
        try:
            return Confirmation(*interleaved(self.runner, command, rounds,
                                             {"baseline": baseline, "chosen": chosen},
                                             self.candidate_acf, self.flags_for, self.deadline))
        finally:
            self._leave_stale()

    def _leave_stale(self) -> None:
        """The project's build outputs now hold some candidate: re-dated, so
        that the user's next build compiles what the ACF says."""
        leave_stale(self.runner.acf_path, self.runner.unit.globs, self.runner.unit.arch)
