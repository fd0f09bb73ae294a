"""The command backend: the user's own build-and-run command prints a metric.

For applications whose kernels cannot be launched alone. The candidate
reaches the command through the wrapper: a copy of the ACF whose target
holds the candidate's knobs is named in NVCC_EVO_ACF, so `make` with
NVCC=nvcc-evo builds the candidate. NVCC_EVO_CANDIDATE_FLAGS carries the
same flags for commands that call nvcc themselves.
"""
from __future__ import annotations

import os
import re
import time
from pathlib import Path

from nvcc_evo.measure import Measurement, failed
from nvcc_evo.system.leftovers import SHELL, run_in_group

NAME = "command"
OBJECTIVES = ("metric",)


def run_command(command: str, metric: str, cwd: Path, candidate_acf: Path, flags: tuple[str, ...],
                timeout: float) -> Measurement:
    env = dict(os.environ, NVCC_EVO_ACF=str(candidate_acf), NVCC_EVO_CANDIDATE_FLAGS=" ".join(flags))
    env.pop("NVCC_EVO_ACTIVE", None)
    started = time.monotonic()
    done = run_in_group([SHELL, "-c", command], cwd=cwd, env=env, timeout=timeout)   # (no orphan on a kill)
    if done.returncode is None:
        return failed("timeout", f"command exceeded {timeout:.0f} s: {command}")
    if done.returncode != 0:
        return failed("command-failed", f"exit {done.returncode}: {command}\n{done.stderr}")
    found = re.search(metric, done.stdout)
    if found is None:
        return failed("no-metric", f"metric /{metric}/ not in the output of {command}\n{done.stdout[-1000:]}")
    try:
        value = float(found.group(1) if found.groups() else found.group(0))
    except ValueError:
        return failed("no-metric", f"metric /{metric}/ matched {found.group(0)!r}, not a number")
    return Measurement("ok", (("metric", value), ("command_time", round(time.monotonic() - started, 3))))
