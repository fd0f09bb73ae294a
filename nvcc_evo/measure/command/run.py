"""One run of a bench command for a candidate: the build outputs re-dated
where the run must build it (command.rebuilt), the environment that names the
candidate's copy of the ACF (and, for a kernel unit, fresh Triton caches
through the stand-ins), the command in a process group of its own with its
timeout, the bench's `check command`s, the wrapper's log read; the run judged
(command.metrics)."""
from __future__ import annotations

import hashlib
import os
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from nvcc_evo.driver.common import PHASE_ENV
from nvcc_evo.driver.dropin_ptxas.afresh import through_stand_ins
from nvcc_evo.measure.command.metrics import CommandUnit, Ran, Resolution, Run, judge
from nvcc_evo.measure.command.rebuilt import copy_to_users_log, leave_stale, read_log
from nvcc_evo.measure.profile.clock import KernelClock
from nvcc_evo.system.leftovers import SHELL, private_folder, remove_private, run_in_group

TAIL_LINES = 12


def candidate_name(flags: tuple[str, ...]) -> str:
    return hashlib.sha256(" ".join(flags).encode()).hexdigest()[:10]


def tail(text: str, count: int = TAIL_LINES) -> str:
    lines = [line for line in text.splitlines() if line.strip()]
    return "\n".join(f"    | {line}" for line in lines[-count:]) or "    | (no output)"


def to_stderr(message: str) -> None:
    print(f"nvcc-evo: {message}", file=sys.stderr, flush=True)


@dataclass
class Runner:
    """Runs a unit's bench command (or its confirmation command) in the project's folder, counting
    the runs (NVCC_EVO_RUN) and the seconds of those that built their candidate."""

    unit: CommandUnit
    acf_path: Path
    primary: str = "metric"             # the metric the confirmation judges
    say: Callable[[str], None] = to_stderr
    # `metric NAME kernels`
    clock: KernelClock = field(default_factory=lambda: KernelClock(active=False))
    runs: int = 0                       # runs so far (NVCC_EVO_RUN)
    built: tuple[float, ...] = ()       # seconds of each run that built (a confirmation's cost)
    resolution: Resolution | None = None

    def __post_init__(self) -> None:
        primary = next((m for m in self.unit.bench.metrics if m.name == self.primary), None)
        self.resolution = Resolution(primary, self.say) if primary is not None else None

    @property
    def folder(self) -> Path:
        return self.acf_path.parent

    def run(self, command: str, acf: Path, flags: tuple[str, ...], phase: str,
            must_build: bool) -> Run:
        """One run of `command` with the candidate whose copy of the ACF is `acf`, judged."""
        if must_build:
            leave_stale(self.acf_path, self.unit.globs, self.unit.arch)
        self.runs += 1
        scratch = Path(private_folder("cand"))
        try:
            env = self._environment(acf, flags, phase, scratch / "wrapper.log")
            env.update(self.clock.environment(str(scratch)))
            started = time.monotonic()
            done = run_in_group([SHELL, "-c", command], cwd=self.folder, env=env,
                                timeout=self.unit.timeout)
            seconds = time.monotonic() - started
            timed = self.clock.read(str(scratch))
            self.built += (seconds,) if must_build else ()
            log_lines = read_log(scratch / "wrapper.log")
            copy_to_users_log(scratch / "wrapper.log")
            commands = any(c.kind == "command" for c in self.unit.bench.run_checks)
            checked = self._check_commands(env) if done.returncode is not None and commands else ""
        finally:
            remove_private(str(scratch))
        output = done.stdout + ("\n" if done.stdout and done.stderr else "") + done.stderr
        judged = judge(self.unit, Ran(done.returncode, output, log_lines, checked, seconds, timed),
                       command, flags, must_build)
        if judged.ok and self.resolution is not None:
            self.resolution.read(self.unit, output, judged.value(self.primary))
        return judged

    def round_cost(self) -> float:
        """Seconds one confirmation round (two builds and runs) is expected to take, from the
        runs so far."""
        return 2 * statistics.median(self.built) if self.built else 0.0

    def _environment(self, acf: Path, flags: tuple[str, ...], phase: str, log: Path) -> dict:
        env = dict(os.environ, NVCC_EVO_ACF=str(acf), NVCC_EVO_CANDIDATE_FLAGS=" ".join(flags),
                   NVCC_EVO_CANDIDATE=candidate_name(flags), **{PHASE_ENV: phase},
                   NVCC_EVO_RUN=str(self.runs), NVCC_EVO_LOG=str(log))
        env.pop("NVCC_EVO_ACTIVE", None)
        if self.unit.triton:
            # Triton compiles the kernel anew in each run (Triton's and TorchInductor's caches of
            # the run's own), through the stand-ins: the log then shows whether the candidate's
            # ptxas ran.
            env = through_stand_ins(env, str(log.parent))
        return env

    def _check_commands(self, env: dict) -> str:
        for check in self.unit.bench.run_checks:
            if check.kind == "command":
                done = run_in_group([SHELL, "-c", str(check.value)], cwd=self.folder, env=env,
                                    timeout=self.unit.timeout)
                if done.returncode != 0:
                    said = (done.stdout + done.stderr).strip().splitlines()
                    return (f"`check command \"{check.value}\"` exited {done.returncode}"
                            + (f": {said[-1][:200]}" if said else ""))
        return ""
