"""What one run of a bench command printed, read: its exit status, whether
the unit was built with the candidate's flags, its checks, then each metric
(`judge`, a `Run`); the runs of a candidate summarised into a Measurement
(`summary`), and the primary metric's printed resolution (`Resolution`)."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

from nvcc_evo.acf import model
from nvcc_evo.acf.bench import command as benchcommand
from nvcc_evo.measure import Measurement
from nvcc_evo.measure.command.rebuilt import flags_problem
from nvcc_evo.measure.stats import MIN_GAIN, summarize
from nvcc_evo.status import Status


@dataclass(frozen=True)
class Run:
    """One run of the command: its status, the metrics it printed, its cost."""

    status: Status
    values: tuple[tuple[str, float], ...] = ()
    seconds: float = 0.0
    detail: str = ""
    failure: str = ""  # what went wrong, in a few words: "exited with status 2", ...

    @property
    def ok(self) -> bool:
        return self.status == Status.OK

    def value(self, metric: str) -> float:
        return dict(self.values)[metric]


@dataclass(frozen=True)
class Ran:
    """What a finished run left to judge: its exit code (None: killed at its
    timeout), its output, the wrapper's log lines, a `check command`'s
    failure ("" when none failed), its seconds, the kernels' time it was clocked
    (`metric NAME kernels`)."""

    code: int | None
    output: str
    log_lines: list[dict]
    checked: str
    seconds: float
    timed: tuple[float, str]


@dataclass(frozen=True)
class CommandUnit:
    """The unit a bench command builds and runs: its globs, architecture, bench, whether it is a
    kernel unit (Triton's, through nvcc-evo-ptxas) and a run's timeout."""

    bench: model.Bench
    globs: tuple[str, ...]
    arch: str
    timeout: float
    triton: bool = False

    def __str__(self) -> str:
        return f"{' '.join(self.globs)} [{self.arch}]"


def judge(unit: CommandUnit, ran: Ran, command: str, flags: tuple[str, ...],
          must_build: bool) -> Run:
    """A run's Run: failed (timeout, exit status, not built with its flags, a failed check, no
    metric) or ok with each metric's value."""
    seconds, output = ran.seconds, ran.output
    if ran.code is None:
        detail = f"the run exceeded {unit.timeout:g} s: {command}\n{output}"
        return Run(Status.TIMEOUT, seconds=seconds, detail=detail,
                   failure=f"ran past its timeout of {unit.timeout:g} s")
    exit_checked = any(c.kind == "exit" for c in unit.bench.run_checks)
    if ran.code != 0 and not exit_checked:
        return Run(Status.COMMAND_FAILED, seconds=seconds,
                   detail=f"exit {ran.code}: {command}\n{output}",
                   failure=f"exited with status {ran.code}")
    status, why = flags_problem(ran.log_lines, unit.globs, unit.arch, flags, must_build,
                                unit.triton)
    if status:
        return Run(status, seconds=seconds, detail=f"{why}\n{output}",
                   failure=f"was not built with its flags ({status}): {why.split(': ')[0]}")
    wrong = benchcommand.wrong_answer(unit.bench.run_checks, output, ran.code) or ran.checked
    if wrong:
        return Run(Status.WRONG_ANSWER, seconds=seconds, detail=f"{wrong}: {command}\n{output}",
                   failure=f"failed its check: {wrong}")
    values = []
    for metric in unit.bench.metrics:
        value: float | str
        if metric.kernels:
            value = ran.timed[1] or ran.timed[0]
        else:
            value = benchcommand.read_metric(metric, output)
        if isinstance(value, str):
            return Run(Status.NO_METRIC, seconds=seconds, detail=f"{value} of {command}\n{output}",
                       failure=f"printed no metric: {value}")
        values.append((metric.name, value))
    return Run(Status.OK, tuple(values), seconds)


def summary(bench: model.Bench, runs: list[Run], seconds: float) -> Measurement:
    """A candidate's runs: each metric's median and (with more than one run) relative spread, the
    seconds they took and how many there were."""
    metrics, spreads = [], []
    for metric in bench.metrics:
        summarized = summarize([r.value(metric.name) for r in runs])
        metrics.append((metric.name, summarized.median))
        if len(runs) > 1:  # one run has no spread: "+- 0" would claim a precision never measured
            spread = summarized.spread if math.isfinite(summarized.spread) else 0.0
            spreads.append((metric.name, spread))
    counted = (("command_time", round(seconds, 3)), ("runs", len(runs)))
    return Measurement(Status.OK, tuple(metrics) + counted, tuple(spreads))


class Resolution:
    """The primary metric's printed resolution, read from the first good run's digits and said once
    where it is coarser than the least gain a retune accepts."""

    def __init__(self, metric: model.Metric, say: Callable[[str], None]):
        self.metric, self.say = metric, say
        self.step: float | None = None

    def read(self, unit: CommandUnit, output: str, value: float) -> None:
        if self.step is not None:
            return
        self.step, coarse = benchcommand.coarse_resolution(self.metric, output, value, MIN_GAIN)
        if coarse:
            self.say(f"{unit}: {coarse}")
