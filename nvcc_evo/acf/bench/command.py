"""The command form of a bench block: what its statements mean and allow.

`metric [NAME] "REGEX" [take HOW] [group G] [unit "U"] [maximize]` reads a
number from a run's output: every match of the regex counts, `take` picks
one (first, last) or combines them (min, max, median, mean); the number is
the named or numbered group, else the first group, else the whole match.
`check` statements say what makes a run a wrong answer; `confirm`, `repeat`
and `timeout` what a run costs. The checks here are the resolve stage's;
`read_metric`, `metric_step` (the resolution a metric is printed with) and
`wrong_answer` are the command backend's (re only).
"""
from __future__ import annotations

import re
import statistics
from typing import Callable

from nvcc_evo.acf import model
from nvcc_evo.acf.expressions import Span

TAKES: dict[str, Callable[[list[float]], float]] = {
    "first": lambda v: v[0], "last": lambda v: v[-1], "min": min, "max": max,
    "median": statistics.median, "mean": statistics.fmean}
# Objectives the command backend reports itself (ptxas's report of the candidate, the run's cost):
# a metric may not take their names.
RESERVED = ("compile_time", "registers", "spills", "stack", "shared", "instructions", "binary_size",
            "command_time")
# One-sided Mann-Whitney U with n rounds a side cannot go below 1 / C(2n, n): 5 rounds are the
# fewest that can reach p < 0.01 (1/252); 4 give at best 1/70.
LEAST_ROUNDS = 5
DEFAULT_ROUNDS = 10


def problems(bench: model.Bench) -> list[tuple[Span, str]]:
    """Every problem of a bench block's command statements, located."""
    found: list[tuple[Span, str]] = []
    seen: dict[str, model.Metric] = {}
    for metric in bench.metrics:
        if metric.name in seen:
            found.append((metric.span, f"metric '{metric.name}' is defined twice (first at line "
                                       f"{seen[metric.name].span.line})"))
        seen.setdefault(metric.name, metric)
        found += _metric_problems(metric)
    for check in bench.run_checks:
        if check.kind == "exit" and not 0 <= int(check.value) <= 255:
            found.append((check.span, f"an exit code is 0..255, got {check.value}"))
        if check.kind in ("match", "absent"):
            found += _regex_problem(str(check.value), check.span, "check")
    rounds = bench.confirm.rounds if bench.confirm is not None else None
    if bench.confirm is not None and rounds is not None and rounds < LEAST_ROUNDS:
        found.append((bench.confirm.span, f"confirm needs at least {LEAST_ROUNDS} rounds (with "
                                          f"{bench.confirm.rounds} the test cannot reach p "
                                          "< 0.01)"))
    if bench.repeat is not None and not 1 <= bench.repeat.low <= bench.repeat.high <= 1000:
        found.append((bench.repeat.span, "repeat takes a count 1..1000, or LOW..HIGH with LOW <= "
                                         f"HIGH, got {bench.repeat.low}..{bench.repeat.high}"))
    if bench.timeout is not None and not bench.timeout.seconds > 0:
        found.append((bench.timeout.span, "timeout takes seconds > 0, got "
                                          f"{bench.timeout.seconds}"))
    return found


def identity(bench: model.Bench) -> str:
    """What of a bench command decides the numbers it gives (not where it
    is written): results measured with another are not reused."""
    parts = (bench.command.text if bench.command else None,
             [(m.name, m.regex, m.take, m.group, m.maximize) + (("kernels",) if m.kernels else ())
              for m in bench.metrics],
             [(c.kind, c.value) for c in bench.run_checks],
             (bench.repeat.low, bench.repeat.high) if bench.repeat else None)
    return repr(parts)


def command_only(bench: model.Bench) -> list[Span]:
    """Spans of command statements in a bench block that has no command."""
    parts = [*bench.metrics, *bench.run_checks, bench.confirm, bench.repeat, bench.timeout]
    return [part.span for part in parts if part is not None]


def _metric_problems(metric: model.Metric) -> list[tuple[Span, str]]:
    found = _regex_problem(metric.regex, metric.span, "metric")
    if metric.name in RESERVED:
        found.append((metric.span, f"metric name '{metric.name}' is an objective the command "
                                   f"backend reports itself (reserved: {', '.join(RESERVED)})"))
    if metric.take not in TAKES:
        found.append((metric.span, f"take is one of {', '.join(TAKES)}, got '{metric.take}'"))
    if found or metric.group is None:
        return found
    compiled = re.compile(metric.regex)
    if isinstance(metric.group, int) and metric.group > compiled.groups:
        found.append((metric.span, f"group {metric.group}: the regex has {compiled.groups} "
                                   "group(s)"))
    if isinstance(metric.group, str) and metric.group not in compiled.groupindex:
        names = ", ".join(compiled.groupindex) or "none"
        found.append((metric.span, f"group '{metric.group}' is not a named group of the regex "
                                   f"(named: {names}; write (?P<{metric.group}>...))"))
    return found


def _regex_problem(regex: str, span: Span, what: str) -> list[tuple[Span, str]]:
    try:
        re.compile(regex)
    except re.error as problem:
        return [(span, f"{what} is not a valid regular expression: {problem}")]
    return []


def _group(metric: model.Metric, pattern: re.Pattern) -> int | str:
    """The group a metric reads: its own, else the regex's first, else the whole match."""
    if metric.group is not None:
        return metric.group
    return 1 if pattern.groups else 0


def read_metric(metric: model.Metric, output: str) -> float | str:
    """The metric's number in a run's output, or why there is none."""
    pattern = re.compile(metric.regex)
    matches = list(pattern.finditer(output))
    if not matches:
        return f"metric {metric.name} /{metric.regex}/ not in the output"
    group = _group(metric, pattern)
    values = []
    for found in matches:
        try:
            values.append(float(found.group(group)))
        except (TypeError, ValueError):
            return (f"metric {metric.name} /{metric.regex}/ matched {found.group(0)!r}: "
                    f"group {group} is not a number")
    return float(TAKES[metric.take](values))


NUMBER = re.compile(r"[-+]?(?P<whole>[0-9]*)(?:\.(?P<fraction>[0-9]*))?"
                    r"(?:[eE](?P<exponent>[-+]?[0-9]+))?")


def printed_step(text: str) -> float | None:
    """The resolution a number was printed with: the value of its last digit
    (`0.0132` -> 0.0001, `13` -> 1, `1.5e-3` -> 0.0001); None if it is not one."""
    found = NUMBER.fullmatch(text.strip())
    if found is None or not (found.group("whole") or found.group("fraction")):
        return None
    return 10.0 ** (int(found.group("exponent") or 0) - len(found.group("fraction") or ""))


def metric_step(metric: model.Metric, output: str) -> float | None:
    """The coarsest resolution the metric's numbers were printed with in a
    run's output (None: none of them reads as a plain number)."""
    pattern = re.compile(metric.regex)
    group = _group(metric, pattern)
    printed = [printed_step(found.group(group) or "") for found in pattern.finditer(output)]
    steps = [step for step in printed if step is not None]
    return max(steps) if steps else None


def coarse_resolution(metric: model.Metric, output: str, value: float,
                      least_gain: float) -> tuple[float, str]:
    """(the metric's printed resolution, what to say when it is coarser, relative to `value`, than
    the least gain a retune accepts: then no run can show such a gain; "" when it is not)."""
    step = metric_step(metric, output) or 0.0
    if not value or step / abs(value) <= least_gain:
        return step, ""
    return step, (f"metric {metric.name} is printed to {step:g} ({step / abs(value):.2%} of "
                  f"{value:g}): coarser than the least gain a retune accepts ({least_gain:.1%}); "
                  "smaller gains cannot show: print more digits")


def wrong_answer(checks: tuple[model.RunCheck, ...], output: str, exit_code: int) -> str:
    """Why a run's output or exit code is a wrong answer ("" when it is
    not), by the bench's `check exit`, `check "RE"` and `check not "RE"`.
    (`check command` runs a program: the backend's.)"""
    for check in checks:
        if check.kind == "exit" and exit_code != check.value:
            return f"exit code {exit_code}, `check exit {check.value}`"
        if check.kind == "match" and re.search(str(check.value), output) is None:
            return f'the output does not match `check "{check.value}"`'
        if check.kind == "absent":
            found = re.search(str(check.value), output)
            if found is not None:
                line = output[output.rfind("\n", 0, found.start()) + 1:].split("\n", 1)[0]
                return f'the output matches `check not "{check.value}"`: {line.strip()[:200]}'
    return ""
