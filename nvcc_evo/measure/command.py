"""The command backend: the user's own build-and-run command prints the metrics.

For applications whose kernels cannot be launched alone (templates, host code
choosing at run time, a project's own harness). The candidate reaches the
command through the wrapper: a copy of the ACF whose target holds its knobs is
named in NVCC_EVO_ACF, so a build with NVCC=nvcc-evo compiles the candidate.
`metric NAME kernels` needs no harness: the unit's own kernels' GPU time in
the run (measure.profile.clock).

- rebuilt, never skipped: before a run that must build the candidate, the files
  the compile database says the unit's compiles wrote are re-dated to 1970, so
  make or ninja rebuild them; and the wrapper's log (NVCC_EVO_LOG, private to
  the run) must show the unit compiled with the candidate's flags, else the
  candidate fails (`not-rebuilt`, `flags-not-applied`);
- statistics: `repeat N` (or `LOW..HIGH`, adaptive: stats.enough) runs per
  candidate, medians and relative spreads stored; `confirm` re-runs winner and
  baseline interleaved (rebuilt each time), sequentially (stats.verdict_clear;
  at most `confirm rounds`; its least rounds and the drift `reserve`d in a time
  budget), judged by stats.faster; a metric printed too coarsely is said;
  `drift`: the baseline rebuilt and run again after the search;
- wrong answers: a bench's `check` statements (acf.bench.command) and `check
  command`; a failed run's last lines go to stderr.

A kernel unit (Triton's, through nvcc-evo-ptxas) gets Triton's and
TorchInductor's caches of its own per run (compiled with the candidate's knobs
in every run); TRITON_PTXAS_PATH and TRITON_PTXAS_BLACKWELL_PATH name the
stand-ins, each running the real program the user named there, if any
(dropin_ptxas.afresh). The command sees NVCC_EVO_PHASE (search, confirm,
drift), NVCC_EVO_CANDIDATE, NVCC_EVO_RUN and NVCC_EVO_CANDIDATE_FLAGS.
"""
from __future__ import annotations

import hashlib
import json
import math
import os
import statistics
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable

from nvcc_evo.acf import model

from nvcc_evo.acf.bench import command as benchcommand
from nvcc_evo.driver.common import PHASE_ENV
from nvcc_evo.driver.compiledb import outputs_of
from nvcc_evo.driver.cmdline.flags import ptxas_values
from nvcc_evo.driver.dropin_ptxas.afresh import through_stand_ins
from nvcc_evo.measure import Confirmation, Measurement, failed
from nvcc_evo.measure.profile.clock import KernelClock
from nvcc_evo.measure.stats import MIN_GAIN, Summary, Verdict, a_speed, enough, judged, judged_clear, summarize
from nvcc_evo.system.clock import NONE, Deadline
from nvcc_evo.system.leftovers import SHELL, private_folder, remove_private, run_in_group
from nvcc_evo.status import Status

LONG_AGO = 86400.0          # what re-dated outputs are stamped with (1970-01-02): older than any source
TAIL_LINES = 12
NOT_REBUILT = ("no compile of unit {} for {} went through nvcc-evo during the run: the build skipped it (nvcc-evo "
               "re-dates the outputs the compile database knows: build it once through nvcc-evo first), or does not "
               "use nvcc-evo as its compiler (NVCC=nvcc-evo, CMAKE_CUDA_COMPILER)")
KERNEL_NOT_REBUILT = ("no compile of kernel unit {} for {} went through nvcc-evo-ptxas during the run: the program "
                      "took the kernel from a cache it sets itself (TRITON_CACHE_DIR, TORCHINDUCTOR_CACHE_DIR; the "
                      "run is given empty ones), names another ptxas (TRITON_PTXAS_PATH, "
                      "TRITON_PTXAS_BLACKWELL_PATH), or no longer compiles that kernel for this architecture")


@dataclass(frozen=True)
class Run:
    """One run of the command: its status, the metrics it printed, its cost."""

    status: Status
    values: tuple[tuple[str, float], ...] = ()
    seconds: float = 0.0
    detail: str = ""
    failure: str = ""                   # what went wrong, in a few words: "exited with status 2", ...

    @property
    def ok(self) -> bool:
        return self.status == Status.OK


def candidate_name(flags: tuple[str, ...]) -> str:
    return hashlib.sha256(" ".join(flags).encode()).hexdigest()[:10]


def redate(paths: list[Path]) -> None:
    """Make a build system see these outputs as older than their sources."""
    for path in paths:
        try:
            os.utime(path, (LONG_AGO, LONG_AGO))
        except FileNotFoundError:
            pass


def _tokens(flags) -> set[str]:
    """A flag list as comparable options: each -Xptxas value on its own."""
    flags = tuple(flags)
    rest = [f for i, f in enumerate(flags) if f != "-Xptxas" and not (i and flags[i - 1] == "-Xptxas")]
    return set(ptxas_values(flags)) | set(rest)


def flags_problem(log_lines: list[dict], globs: tuple[str, ...], arch: str, flags: tuple[str, ...],
                  must_build: bool, kernel: bool = False) -> tuple[Status | None, str]:
    """(status, why) when the wrapper's log of a run does not show the unit
    compiled with the candidate's flags; (None, "") when it does. A run that
    need not build may compile nothing, but what it compiles must be the candidate.
    `kernel`: a kernel unit, compiled by the program's Triton through the drop-in ptxas."""
    mine = []
    for line in log_lines:
        for unit in line.get("units", ()):
            if tuple(unit.get("unit", ())) == tuple(globs) and unit.get("arch") == arch:
                mine.append((line, unit.get("input")))
    if not mine:
        if not must_build:
            return None, ""
        return Status.NOT_REBUILT, (KERNEL_NOT_REBUILT if kernel else NOT_REBUILT).format(' '.join(globs), arch)
    wanted = _tokens(flags)
    for line, name in mine:
        got = _tokens(line.get("added", ()))
        for step in line.get("ptxas_per_step", ()):
            if step.get("input") == name and step.get("arch") == arch:
                got |= set(step.get("options", ()))
        missing = sorted(wanted - got)
        if missing:
            skipped = "; ".join(line.get("skipped", ())) or "nothing"
            return Status.FLAGS_NOT_APPLIED, (f"the candidate's flags did not reach the compile of {name}: missing "
                                         f"{' '.join(missing)} (the wrapper added: {' '.join(line.get('added', ()))}"
                                         f"; skipped: {skipped})")
    return None, ""


def tail(text: str, count: int = TAIL_LINES) -> str:
    lines = [line for line in text.splitlines() if line.strip()]
    return "\n".join(f"    | {line}" for line in lines[-count:]) or "    | (no output)"


@dataclass
class CommandBench:
    """Runs one unit's bench command for its candidates."""

    bench: model.Bench
    acf_path: Path
    globs: tuple[str, ...]
    arch: str
    candidate_acf: Callable             # genome -> Path of a copy of the ACF holding the candidate
    flags_for: Callable                 # genome -> the flags the wrapper must add for it
    timeout: float = 300.0
    primary: str = "metric"             # the metric the confirmation judges
    say: Callable[[str], None] = lambda message: print(f"nvcc-evo: {message}", file=sys.stderr, flush=True)
    best: Summary | None = None         # the primary metric's best so far (adaptive repeats stop early)
    runs: int = 0                       # runs so far (NVCC_EVO_RUN)
    built: tuple[float, ...] = ()       # seconds of each run that built its candidate (what a confirmation run costs)
    first: float = 0.0                  # seconds of the first candidate's (the baseline's) measurement
    step: float | None = None           # the primary metric's printed resolution, once said
    deadline: Deadline = NONE           # the search's, which the confirmation ends by (finish_by)
    triton: bool = False                # a kernel unit: Triton compiles it through nvcc-evo-ptxas
    clock: KernelClock = field(default_factory=lambda: KernelClock(active=False))   # `metric NAME kernels`

    @property
    def folder(self) -> Path:
        return self.acf_path.parent

    @property
    def command(self) -> str:
        """The bench command (resolve: a command backend's bench has one)."""
        assert self.bench.command is not None
        return self.bench.command.text

    @property
    def maximized(self) -> tuple[str, ...]:
        return tuple(m.name for m in self.bench.metrics if m.maximize)

    # ------------------------------------------------------------ one run
    def run(self, command: str, acf: Path, flags: tuple[str, ...], phase: str, must_build: bool) -> Run:
        if must_build:
            redate(outputs_of(self.acf_path, self.globs, self.arch))
        self.runs += 1
        scratch = Path(private_folder("cand"))
        try:
            env = self._environment(acf, flags, phase, scratch / "wrapper.log")
            env.update(self.clock.environment(str(scratch)))
            started = time.monotonic()
            done = run_in_group([SHELL, "-c", command], cwd=self.folder, env=env, timeout=self.timeout)
            seconds = time.monotonic() - started
            timed = self.clock.read(str(scratch))
            self.built += (seconds,) if must_build else ()
            log_lines = _read_log(scratch / "wrapper.log")
            _copy_to_users_log(scratch / "wrapper.log")
            if done.returncode is not None and any(c.kind == "command" for c in self.bench.run_checks):
                checked = self._check_commands(env)
            else:
                checked = ""
        finally:
            remove_private(str(scratch))
        output = done.stdout + ("\n" if done.stdout and done.stderr else "") + done.stderr
        judged = self._judge(done.returncode, output, log_lines, flags, must_build, checked, seconds, command, timed)
        if judged.ok and self.step is None:
            self._resolution(output, dict(judged.values)[self.primary])
        return judged

    def _resolution(self, output: str, value: float) -> None:
        """The primary metric's printed resolution, from the first good run's digits, said when too coarse."""
        metric = next(m for m in self.bench.metrics if m.name == self.primary)
        self.step, coarse = benchcommand.coarse_resolution(metric, output, value, MIN_GAIN)
        if coarse:
            self.say(f"{' '.join(self.globs)} [{self.arch}]: {coarse}")

    def _environment(self, acf: Path, flags, phase: str, log: Path) -> dict:
        env = dict(os.environ, NVCC_EVO_ACF=str(acf), NVCC_EVO_CANDIDATE_FLAGS=" ".join(flags),
                   NVCC_EVO_CANDIDATE=candidate_name(flags), **{PHASE_ENV: phase}, NVCC_EVO_RUN=str(self.runs),
                   NVCC_EVO_LOG=str(log))
        env.pop("NVCC_EVO_ACTIVE", None)
        if self.triton:
            # Triton compiles the kernel anew in each run (Triton's and TorchInductor's caches of the run's own),
            # through the stand-ins: the log then shows whether the candidate's ptxas ran.
            env = through_stand_ins(env, str(log.parent))
        return env

    def _check_commands(self, env: dict) -> str:
        for check in self.bench.run_checks:
            if check.kind == "command":
                done = run_in_group([SHELL, "-c", str(check.value)], cwd=self.folder, env=env, timeout=self.timeout)
                if done.returncode != 0:
                    said = (done.stdout + done.stderr).strip().splitlines()
                    return (f"`check command \"{check.value}\"` exited {done.returncode}"
                            + (f": {said[-1][:200]}" if said else ""))
        return ""

    def _judge(self, code, output: str, log_lines, flags, must_build: bool, checked: str, seconds: float,
               command: str, timed: tuple[float, str]) -> Run:
        if code is None:
            return Run(Status.TIMEOUT, seconds=seconds, detail=f"the run exceeded {self.timeout:g} s: {command}\n{output}",
                       failure=f"ran past its timeout of {self.timeout:g} s")
        exit_checked = any(c.kind == "exit" for c in self.bench.run_checks)
        if code != 0 and not exit_checked:
            return Run(Status.COMMAND_FAILED, seconds=seconds, detail=f"exit {code}: {command}\n{output}",
                       failure=f"exited with status {code}")
        status, why = flags_problem(log_lines, self.globs, self.arch, flags, must_build, self.triton)
        if status:
            return Run(status, seconds=seconds, detail=f"{why}\n{output}",
                       failure=f"was not built with its flags ({status}): {why.split(': ')[0]}")
        wrong = benchcommand.wrong_answer(self.bench.run_checks, output, code) or checked
        if wrong:
            return Run(Status.WRONG_ANSWER, seconds=seconds, detail=f"{wrong}: {command}\n{output}",
                       failure=f"failed its check: {wrong}")
        values = []
        for metric in self.bench.metrics:
            value = (timed[1] or timed[0]) if metric.kernels else benchcommand.read_metric(metric, output)
            if isinstance(value, str):
                return Run(Status.NO_METRIC, seconds=seconds, detail=f"{value} of {command}\n{output}",
                           failure=f"printed no metric: {value}")
            values.append((metric.name, value))
        return Run(Status.OK, tuple(values), seconds)

    # ------------------------------------------------------------ a candidate
    def measure(self, genome, flags: tuple[str, ...], phase: str = "search") -> Measurement:
        """`repeat` runs (the first builds), medians and relative spreads."""
        low, high = (self.bench.repeat.low, self.bench.repeat.high) if self.bench.repeat else (1, 1)
        acf = self.candidate_acf(genome)
        self.clock.use(genome)
        started = time.monotonic()
        runs: list[Run] = []
        try:
            while len(runs) < high:
                run = self.run(self.command, acf, flags, phase, must_build=not runs)
                if not run.ok:
                    self.say(f"{' '.join(self.globs)} [{self.arch}] candidate {' '.join(flags) or '(baseline)'}: "
                             f"{run.status} after {run.seconds:.1f} s; the last lines:\n{tail(run.detail)}")
                    return failed(run.status, run.detail)
                runs.append(run)
                primary = [dict(r.values)[self.primary] for r in runs]
                if enough(primary, low, high, self.best, self.primary in self.maximized):
                    break
        finally:
            acf.unlink(missing_ok=True)
            self._leave_stale()
        measurement = self._summary(runs, time.monotonic() - started)
        self.first = self.first or time.monotonic() - started
        self._note(measurement, flags, len(runs))
        return measurement

    def round_cost(self) -> float:
        """Seconds one confirmation round (two builds and runs) is expected to take, from the runs so far."""
        return 2 * statistics.median(self.built) if self.built else 0.0

    def reserve(self) -> float:
        """Seconds the end drift and the confirmation's least rounds are expected to take, with a margin of a
        fifth: kept back from a time budget (further rounds only as the time left allows: `finish_by`)."""
        return 1.2 * (benchcommand.LEAST_ROUNDS * self.round_cost() + self.first)

    def finish_by(self, deadline: Deadline) -> None:   # the steps after the search end by its end
        self.deadline = deadline

    def _summary(self, runs: list[Run], seconds: float) -> Measurement:
        metrics, spreads = [], []
        for metric in self.bench.metrics:
            summary = summarize([dict(r.values)[metric.name] for r in runs])
            metrics.append((metric.name, summary.median))
            if len(runs) > 1:       # one run has no spread: "+- 0" would claim a precision never measured
                spreads.append((metric.name, summary.spread if math.isfinite(summary.spread) else 0.0))
        primary = summarize([dict(r.values)[self.primary] for r in runs])
        if self.best is None or (primary.median > self.best.median if self.primary in self.maximized
                                 else primary.median < self.best.median):
            self.best = primary
        return Measurement(Status.OK, tuple(metrics) + (("command_time", round(seconds, 3)), ("runs", len(runs))),
                           tuple(spreads))

    def _note(self, measurement: Measurement, flags, count: int) -> None:
        """The progress of a slow search: one line per candidate, with its cost."""
        units = {m.name: m.unit for m in self.bench.metrics}
        shown = ", ".join(f"{name} {value:.5g}{(' ' + units[name]) if units.get(name) else ''}"
                          + (f" ±{dict(measurement.spreads)[name]:.1%}" if name in dict(measurement.spreads) else "")
                          for name, value in measurement.metrics if name in units)
        self.say(f"{' '.join(self.globs)} [{self.arch}] {' '.join(flags) or '(baseline)'}: {shown} "
                 f"({count} run{'s' if count > 1 else ''}, {measurement.get('command_time'):.1f} s)")

    def drift(self, genome, first: Measurement) -> float | None:
        """The baseline (`genome`) rebuilt and run again after the search, as
        a candidate is (its `repeat` runs): the relative change of its primary
        metric against `first`, its measurement when the search began; None
        when either has no such metric."""
        before = first.get(self.primary, math.nan)
        if not math.isfinite(before) or before == 0:
            return None
        again = self.measure(genome, self.flags_for(genome), "drift")
        return again.get(self.primary) / before - 1 if again.ok else None

    # ------------------------------------------------------------ the confirmation
    def confirm(self, baseline, chosen, build=None) -> Confirmation:
        """Winner and baseline (genomes) rebuilt by the project's command and
        run in turn (A B, B A, ...) for `confirm rounds` rounds with the
        confirmation command; judged by the primary metric with the GPU
        backend's rule. `build` (the Backend's compile of a genome) is not
        used: the command builds each side itself."""
        spec = self.bench.confirm or model.Confirm()
        rounds = spec.rounds or benchcommand.DEFAULT_ROUNDS
        command = spec.command or self.command
        try:
            return Confirmation(*self._interleaved(command, rounds, {"baseline": baseline, "chosen": chosen}))
        finally:
            self._leave_stale()

    def _leave_stale(self) -> None:
        """The project's build outputs now hold some candidate: re-dated, so
        that the user's next build compiles what the ACF says."""
        redate(outputs_of(self.acf_path, self.globs, self.arch))

    def _interleaved(self, command: str, rounds: int, sides: dict) -> tuple[Verdict, str]:
        samples: dict[str, list[float]] = {"baseline": [], "chosen": []}
        problem = ""
        for index in range(rounds):
            for side in (("baseline", "chosen") if index % 2 == 0 else ("chosen", "baseline")):
                genome = sides[side]
                acf = self.candidate_acf(genome)
                self.clock.use(genome)
                try:
                    run = self.run(command, acf, self.flags_for(genome), "confirm", must_build=True)
                finally:
                    acf.unlink(missing_ok=True)
                if not run.ok:
                    who = "baseline" if side == "baseline" else "chosen candidate"
                    problem = f"the {who}'s confirmation run {index + 1} of {rounds} {run.failure or run.status}"
                    self.say(f"{' '.join(self.globs)} [{self.arch}]: {problem}; the last lines:\n{tail(run.detail)}")
                    return self._judged(samples), problem
                samples[side].append(dict(run.values)[self.primary])
            if judged_clear(samples, rounds, benchcommand.LEAST_ROUNDS, self.primary in self.maximized):
                break              # sequential: the verdict will not change with more rounds
            if index + 1 >= benchcommand.LEAST_ROUNDS and self.deadline.left() < self.round_cost():
                self.say(f"{' '.join(self.globs)} [{self.arch}]: confirmation ends after {index + 1} of {rounds} rounds: "
                         "no time left for another")
                break
        return self._judged(samples), problem

    def _judged(self, samples: dict[str, list[float]]) -> Verdict:
        """The primary metric's verdict (stats.judged), named where it is not a time or a rate."""
        metric = next(m for m in self.bench.metrics if m.name == self.primary)
        found = judged(samples, metric.maximize)
        return found if a_speed(metric.name, metric.unit, metric.maximize) else replace(found, judged=metric.name)


def _read_log(path: Path) -> list[dict]:
    lines: list[dict] = []
    text = path.read_text() if path.exists() else ""      # (a private folder: a run that compiled nothing has none)
    for line in text.splitlines():
        try:
            lines.append(json.loads(line))
        except (ValueError, RecursionError):
            continue
    return lines


def _copy_to_users_log(path: Path) -> None:
    """The user's own NVCC_EVO_LOG gets the run's compiles too."""
    users = os.environ.get("NVCC_EVO_LOG")
    if users and path.exists():
        from nvcc_evo.system.files import append
        append(users, path.read_text())         # never through a link
