"""`nvcc-evo --hot`: from an application to its hot kernels and the units that build them.

`--hot -- COMMAND`: the command runs once with the injection library
(measure.profile), its kernels' times are read, ranked and attributed to
the recorded builds (hot.origin, hot.table), printed on stdout and saved as
`.nvcc-evo/hot/profile.json` beside the ACF. `--hot --from FILE`: the same
from a saved profile or Nsight Systems' kernel summary. `--write` adds unit
blocks for the hot units no ACF unit tunes yet (hot.write). Progress and
problems go to stderr; the command's own output passes through as it comes
(its stdout on stdout, before the table; its stderr on stderr, its tail
kept for the message should it fail).
"""
from __future__ import annotations

import os
import re
import shlex
import shutil
import sys
import time
from pathlib import Path
from typing import Mapping

from nvcc_evo.acf.resolve import load
from nvcc_evo.driver.cmdline.cuda_driver import device_archs
from nvcc_evo.driver.common import NvccNotFound, find_real_nvcc
from nvcc_evo.driver.compiledb import db_folder
from nvcc_evo.driver.match.find import find_acf as nearest, unreadable, untrusted_acf
from nvcc_evo.errors import EnvironmentProblem, EvoError, Interrupted, UsageError
from nvcc_evo.hot.origin import Origins
from nvcc_evo.hot.profile import Profile, read_profile, save
from nvcc_evo.hot.table import HotUnit, attribute, jit_warnings, render
from nvcc_evo.hot.write import write_units
from nvcc_evo.measure.profile.clock import unrecordable
from nvcc_evo.measure.profile.library import library
from nvcc_evo.measure.profile.records import KernelTime, environment, read_run
from nvcc_evo.system.leftovers import (GROUP, Finished, not_started, private_folder,
                                      remove_private, run_in_group_shown)
from nvcc_evo.system.say import log

TAIL = 12
SNAPSHOT_SECONDS = 1    # inject.c's: a process's kernels are written this often, and at its exit


NO_GPU = ("--hot runs the command on an NVIDIA GPU; use --hot --from FILE with a profile made on a "
          "machine with one")


def injection(environ: Mapping[str, str]) -> str:
    """The injection library, after the GPU and CUPTI are known to be there (EnvironmentProblem:
    both said)."""
    try:
        nvcc = find_real_nvcc(environ)
    except NvccNotFound as error:
        raise EnvironmentProblem(f"--hot: {error}") from None
    problems = unrecordable(environ, nvcc, NO_GPU)
    if problems:
        raise EnvironmentProblem("--hot cannot record kernel times here: "
                                 + "; and ".join(problems))
    return library(environ, nvcc)


def missing_program(command: list[str], environ: Mapping[str, str]) -> str:
    """Why the command's program cannot be started ("" when it can): said once, before it runs (the
    shell that starts it would say it too, and its failure again), after what the machine lacks."""
    name = command[0]
    if os.sep not in name:
        if shutil.which(name, path=environ.get("PATH", os.defpath)) is None:
            return f"{name}: command not found (no such program on PATH)"
        return ""
    if not os.path.exists(name):
        return f"{name}: no such file"
    if os.path.isdir(name):
        return f"{name}: is a folder, not a program"
    if not os.access(name, os.X_OK):
        return (f"{name}: not executable (chmod +x {shlex.quote(name)}, or name its interpreter "
                "first)")
    interpreter = _interpreter(name)
    if interpreter and not os.path.isfile(interpreter):
        return f"{name}: its interpreter {interpreter} (its #! line) does not exist"
    if interpreter and not os.access(interpreter, os.X_OK):
        return f"{name}: its interpreter {interpreter} (its #! line) is not executable"
    return ""


def _interpreter(path: str) -> str:
    """The program a script's `#!` line names ("": no such line, or the file cannot be read)."""
    try:
        with open(path, "rb") as file:
            first = file.readline(4096)
    except OSError:
        return ""
    words = first[2:].decode(errors="replace").split() if first.startswith(b"#!") else []
    return words[0] if words else ""


def _not_started(command: list[str], said: str) -> str:
    """Why the shell could not start the command, from its own words (`GROUP: 1: NAME: WHY`)."""
    line = said.strip().splitlines()[0][len(f"{GROUP}: "):]
    line = re.sub(r"^(line )?\d+: ", "", line)
    return line.removeprefix(f"{command[0]}: ")


def profiled(command: list[str]) -> tuple[Profile, bool]:
    """The command run once with the injection library, its output shown as it comes; its kernels
    (EvoError: it failed, or ran no kernel), and whether Ctrl-C stopped it: then its processes
    were killed, and the kernels are those of their last snapshots (a second apart; Interrupted:
    none)."""
    lib = injection(os.environ)
    missing = missing_program(command, os.environ)
    if missing:
        raise UsageError(f"--hot -- {missing}")
    folder = private_folder("hot")
    shown = shlex.join(command)
    try:
        os.chmod(folder, 0o700)
        env = {**os.environ, **environment(folder, lib)}
        if os.environ.get("CUDA_INJECTION64_PATH"):
            log(f"CUDA_INJECTION64_PATH={os.environ['CUDA_INJECTION64_PATH']} is replaced for this "
                "run (one injection library a process)")
        log(f"running {shown} with kernel recording (CUPTI activity, no counters)")
        sys.stdout.flush()
        started = time.monotonic()
        done: Finished | None = None            # None: Ctrl-C stopped it (its group killed)
        try:
            done = run_in_group_shown(command, cwd=os.getcwd(), env=env)
        except KeyboardInterrupt:
            pass
        seconds = time.monotonic() - started
        rows, problems = read_run(folder)       # (a stopped run: its processes' last snapshots)
    finally:
        remove_private(folder)
    if done is None:
        return _stopped(command, rows, problems, seconds), True
    if not_started(done):          # (its words held back: said here, once)
        raise UsageError(f"--hot -- {command[0]}: cannot be started: "
                         f"{_not_started(command, done.stderr)}")
    if done.returncode != 0:
        said = [line for line in done.stderr.splitlines() if line.strip()][-TAIL:]
        tail = "\n".join(f"    | {line}" for line in said) or "    | (nothing on stderr)"
        raise EvoError(f"{shown} exited with status {done.returncode}: no profile saved, nothing "
                       f"written; the last lines of its stderr:\n{tail}")
    for problem in problems:
        log(f"kernel times: {problem}")
    if not rows:
        raise EvoError(f"{shown} ran no kernel on the GPU (no process of it launched one, or none "
                       "reached the driver through CUDA_INJECTION64_PATH): nothing to rank, no "
                       "profile saved")
    return Profile(tuple(rows), True, f"the run of {shown}", tuple(command), os.getcwd(),
                   done.returncode, round(seconds, 3), tuple(problems)), False


def _stopped(command: list[str], rows: list[KernelTime], problems: list[str],
             seconds: float) -> Profile:
    """The profile of a run Ctrl-C stopped after `seconds`: its processes' last snapshots."""
    shown = shlex.join(command)
    if not rows:
        raise Interrupted(f"interrupted: {shown} was stopped before a process of it recorded a "
                          f"kernel (each writes its kernels every {SNAPSHOT_SECONDS} s and at its "
                          "exit): no profile saved")
    for problem in problems:
        log(f"kernel times: {problem}")
    return Profile(tuple(rows), True, f"the run of {shown}, stopped by Ctrl-C", tuple(command),
                   os.getcwd(), None, round(seconds, 3), tuple(problems))


def find_acf(named: str | None) -> Path | None:
    """The ACF --acf names, else the nearest nvcc-evo.acf here or above (None: none; its kernels map
    nowhere)."""
    if named:
        why = unreadable(named)
        if why:
            raise UsageError(f"--acf {named}: {why}")
        return Path(os.path.abspath(named))
    found = nearest([Path.cwd()], os.environ)
    if found is not None and untrusted_acf(found, os.environ):
        raise EnvironmentProblem(untrusted_acf(found, os.environ))
    return found


def how_to_record(acf_path: Path | None) -> str:
    """Why no kernel maps to a recorded build, and how the build gets recorded: only the compiles an
    ACF unit covers are, when they run through nvcc-evo (a build whose objects are up to date
    compiles nothing)."""
    record = ("unit \"**/*.cu\" {} records every compile under its folder (a unit of no search "
              "block and no entry: a build adds nothing for it, and a retune that runs benches "
              "passes it by)")
    again = ("rebuild from clean through nvcc-evo (make clean && make NVCC=nvcc-evo, cmake "
             "-DCMAKE_CUDA_COMPILER=nvcc-evo: objects built before are not recorded) and run --hot "
             "again (Triton's kernels: unit kernel \"*\" {}, and the run with "
             "TRITON_PTXAS_PATH=nvcc-evo-ptxas, for sm_100 and later "
             "TRITON_PTXAS_BLACKWELL_PATH=nvcc-evo-ptxas-blackwell too, and empty TRITON_CACHE_DIR "
             "and TORCHINDUCTOR_CACHE_DIR: a cached kernel runs no ptxas)")
    if acf_path is None:
        return (f"no ACF here or above: no kernel maps to a recorded build; write an nvcc-evo.acf "
                f"({record}), {again}")
    if not any(db_folder(acf_path).glob("*.json")):
        return f"no compile of {acf_path.parent} is recorded yet: {record}; {again}"
    return (f"no kernel of the profile comes from a compile recorded beside {acf_path} (were they "
            f"built by a unit of it, through nvcc-evo?): {record}; {again}")


def _built_for(units: list[HotUnit], origins: Origins) -> list[tuple[str, set[str]]]:
    """Each hot source and the architectures its recorded compiles build (Triton's kernels, built
    for the GPU they run on, left out)."""
    return [(unit.source, origins.archs.get(unit.origins[0].record.input, set())) for unit in units
            if not unit.origins[0].is_kernel]


def _interrupted(saved: Path, write: bool) -> str:
    """What Ctrl-C of a --hot run leaves: the table printed, the profile saved, nothing
    written."""
    then = ""
    if write:
        then = f"; nvcc-evo --hot --from {shlex.quote(str(saved))} --write writes from it"
    return ("interrupted: the table above holds the kernels the command's processes recorded "
            f"until their last snapshot (every {SNAPSHOT_SECONDS} s) or exit; the profile is saved "
            f"as {saved}, nothing written{then}")


def run_hot(acf: str | None, source: str | None, command: list[str], write: bool, least: float,
            build: str | None, run: str | None) -> int:
    acf_path = find_acf(acf)
    if source and command:
        raise UsageError("--hot: either --from FILE or -- COMMAND, not both")
    if not source and not command:
        raise UsageError("--hot needs a command to run (nvcc-evo --hot -- ./app ARGS) or "
                         "--from FILE")
    profile, stopped = (read_profile(source), False) if source else profiled(command)
    file = load(str(acf_path)) if acf_path is not None else None
    origins = Origins(acf_path, file.units) if acf_path is not None and file is not None else None
    hot, units = attribute(profile, origins)
    print(render(profile, hot, units, str(acf_path.parent) if acf_path else None), end="",
          flush=True)
    if not source:
        saved = save(acf_path.parent if acf_path else Path.cwd(), profile)
        if stopped:
            raise Interrupted(_interrupted(saved, write))
        log(f"profile saved as {saved} (nvcc-evo --hot --from FILE reads it again)")
        if origins is not None:
            for warning in jit_warnings(_built_for(units, origins), device_archs() or ()):
                log(warning)
    if acf_path is None or not units:
        log(how_to_record(acf_path) + (": nothing written" if write else ""))
        return 1 if write else 0
    if write:
        write_units(acf_path, units, profile, least, build, run)
    return 0
