"""ptxas options per input and architecture, for a call that builds several.

nvcc hands every -Xptxas value to every ptxas run of a call, so tuned knobs
that differ between, say, sm_80 and sm_90, or between two inputs compiled in
one call, cannot go on its command line. Instead nvcc-evo asks nvcc for its
own steps (`--dryrun`, with a private `--keep-dir` so that no temporary file
can collide or stay behind), gives each `ptxas -arch=sm_XX` step the options
of its input and architecture (the step's PTX file says which input: nvcc
names kept files after it), and runs the steps with /bin/sh, as nvcc itself
does, from a script file in that folder. The tools' own temporary files go
to the private folder too (TMPDIR), and it is removed when the steps end:
done, failed or interrupted; it is named for the process, so that the next
split build sweeps one that a `kill -9` left. A dependency file (`-MD`, `-MMD`)
comes from an internal nvcc step no shell can run, so nvcc is asked for it
alone first (`-M`, `-MM` with the same -MF, -MT, -MP: the same file).

Only ptxas knobs can differ: defines and nvcc options reach the host
compile too, which is one for all architectures. Anything unexpected in the
steps (a ptxas step for an input or architecture the call does not name,
none at all) means no split: the call then runs as nvcc would, with the
knobs common to every input and architecture.
"""
from __future__ import annotations

import os
import re
import shlex
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from nvcc_evo.driver.cmdline.nvcc_options import NvccCall, rebuild_argv
from nvcc_evo.driver.cmdline.ptxas import step_command
from nvcc_evo.system.leftovers import private_folder, remove_private, sweep_temporary

if TYPE_CHECKING:
    from collections.abc import Mapping

# Calls whose steps are not a plain compile, or whose user wants to see or
# keep nvcc's own steps: run as asked.
NOT_SPLIT = ("--verbose", "--dryrun", "--keep", "--keep-dir", "--save-temps", "--preprocess",
             "--generate-dependencies", "--generate-nonsystem-dependencies", "--dlink-time-opt",
             "--lto",
             "--device-link", "--run", "--ptx", "--optix-ir", "--lib")

SHELL = "/bin/sh"          # what nvcc itself runs its steps with
SCRIPT_NAME = "nvcc-evo-steps.sh"   # in the keep folder; no kept file of nvcc's ends in .sh
ASSIGNMENT = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)=(.*)", re.S)
PTXAS_STEP = re.compile(r"ptxas\s(?:.*\s)?-arch=(sm_[0-9a-z]+)\s")


class Steps(NamedTuple):
    """nvcc's steps for one call: the variables it sets, then the commands."""

    variables: dict[str, str]
    commands: tuple[str, ...]


# -MD, -MMD and what nvcc alone makes of them.
DEPENDENCIES = {"--generate-dependencies-with-compile": "-M",
                "--generate-nonsystem-dependencies-with-compile": "-MM"}
DEPENDENCY_OPTIONS = {*DEPENDENCIES, "--dependency-output", "--dependency-target-name",
                      "--generate-dependency-targets"}


def why_not(call: NvccCall) -> str:
    """Why this call's steps are not split ("" when they may be)."""
    for name in NOT_SPLIT:
        if call.has(name):
            return f"{name} asks for nvcc's own steps or keeps them"
    if any(call.has(name) for name in DEPENDENCIES):
        if len(call.inputs) != 1:
            return "a dependency file for several inputs"
        if not call.has("--dependency-output"):
            return "a dependency file without -MF (nvcc names it itself)"
    stems = [Path(name).stem for name in call.inputs]
    if len(set(stems)) != len(stems):
        return "two inputs of the same name (their kept files would collide)"
    if any(o.origin != "argv" and o.name in DEPENDENCY_OPTIONS for o in call.all_options()):
        return "dependency options from the environment"
    return ""


def dependency_command(nvcc: str, call: NvccCall, extra: list[str]) -> list[str]:
    """nvcc asked for the call's dependency file alone; [] when the call
    writes none."""
    mode = next((DEPENDENCIES[name] for name in DEPENDENCIES if call.has(name)), None)
    output = call.last("--dependency-output")
    if mode is None or output is None:         # (without -MF a call is not split: why_not)
        return []
    targets = call.values("--dependency-target-name") or call.values("--output-file")[-1:]
    command = [nvcc, *rebuild_argv(list(call.argv), DEPENDENCY_OPTIONS | {"--output-file"},
                                   call.inputs[0]),
               *extra, mode, "-MF", output]
    for target in targets:
        command += ["-MT", target]
    return command + (["-MP"] if call.has("--generate-dependency-targets") else [])


def read_steps(text: str) -> Steps:
    """The `#$ ` lines of `nvcc --dryrun`: `NAME=value` lines set a variable
    (the value taken as printed), every other line is a shell command."""
    variables: dict[str, str] = {}
    commands = []
    for line in text.splitlines():
        if not line.startswith("#$ "):
            continue
        body = line[3:]
        assignment = ASSIGNMENT.fullmatch(body)
        if assignment and " " not in assignment.group(1):
            variables[assignment.group(1)] = assignment.group(2)
        else:
            commands.append(body.strip())
    return Steps(variables, tuple(commands))


def step_input(command: str, keep_dir: str, inputs: tuple[str, ...]) -> str | None:
    """The input a ptxas step compiles: its PTX is the user's own file, or a
    kept file nvcc named after the input (`NAME.ptx`, `NAME.compute_90.ptx`)."""
    try:
        words = shlex.split(command)
    except ValueError:           # (a quote in a file's name: nvcc prints it unquoted, and its own
                                 # run fails)
        return None
    ptx = next((word for word in words if word.endswith(".ptx")), None)
    if ptx is None:
        return None
    if os.path.dirname(ptx) != keep_dir:
        return next((name for name in inputs if os.path.abspath(name) == os.path.abspath(ptx)),
                    None)
    kept = os.path.basename(ptx)
    named = [name for name in inputs
             if kept == f"{Path(name).stem}.ptx" or kept.startswith(f"{Path(name).stem}.compute_")]
    return max(named, key=lambda name: len(Path(name).stem)) if named else None


def with_options(steps: Steps, options: dict[tuple[str, str], tuple[str, ...]], keep_dir: str,
                 inputs: tuple[str, ...],
                 programs: dict[tuple[str, str], str] | None = None) -> Steps | str:
    """The steps with each ptxas run given the options of its (input, arch),
    and run by the ptxas `programs` names for it (else nvcc's own), or why
    that cannot be done. (`rm` of a file that is not there does not stop
    nvcc; here neither.)"""
    commands, seen = [], set()
    for command in steps.commands:
        if command.startswith("--"):
            return f"nvcc's steps include an internal one ({command})"
        step = PTXAS_STEP.match(command)
        if step is None:
            commands.append("rm -f " + command[3:] if command.startswith("rm ") else command)
            continue
        key = (step_input(command, keep_dir, inputs), step.group(1))
        if key not in options:
            return (f"nvcc runs ptxas for {key[0] or 'an unknown input'} [{key[1]}], which the "
                    "call was not seen to build")
        seen.add(key)
        commands.append(step_command(command, (programs or {}).get(key), options[key]))
    if not seen:
        return "nvcc's steps run no ptxas"
    return Steps(steps.variables, tuple(commands))


def script(steps: Steps, keep_dir: str | None, first: list[str] | tuple = ()) -> str:
    """A /bin/sh script that runs the command `first` (if any), then the
    steps in order, stops at the first failure with its exit status, and
    removes `keep_dir` in any case (None: its owner does)."""
    lines = ["set -e"] + ([f"trap 'rm -rf {shlex.quote(keep_dir)}' EXIT",
                           # then EXIT's
                           "trap 'exit 129' HUP; trap 'exit 130' INT; trap 'exit 143' TERM"]
                          if keep_dir else [])
    if first:
        lines.append(" ".join(shlex.quote(word) for word in first))
    return "\n".join(lines + list(steps.commands)) + "\n"


class Exec(NamedTuple):
    """What to exec: the program, its argv and its environment."""

    path: str
    argv: list[str]
    env: dict[str, str]


def plan_launch(nvcc: str, call: NvccCall, extra: list[str],
                options: dict[tuple[str, str], tuple[str, ...]],
                environ: Mapping[str, str],
                programs: dict[tuple[str, str], str] | None = None) -> Exec | str | None:
    """The split run of the call (with the common flags `extra` added) with
    ptxas `options` and `programs` per (input, arch); else why there is none, or None when
    nvcc refuses the call itself (it will say why when run as asked).
    Nothing is left behind without a split. The call must have passed why_not."""
    if not os.access(SHELL, os.X_OK):
        return f"no {SHELL} to run nvcc's steps"
    temporary = environ.get("TMPDIR") or None
    sweep_temporary(temporary)          # what killed builds left (their locks are free)
    keep_dir = private_folder("steps", temporary, across_exec=True)   # its lock held by the steps
                                                                      # run
    argv = [*rebuild_argv(list(call.argv), DEPENDENCY_OPTIONS, None), *extra]
    try:
        asked = subprocess.run([nvcc, *argv, "--dryrun", "--keep", "--keep-dir", keep_dir],
                               capture_output=True, text=True, timeout=120, env=dict(environ))
    except (OSError, subprocess.SubprocessError) as error:
        remove_private(keep_dir)
        return f"nvcc --dryrun failed to run ({error})"
    steps = None
    if asked.returncode == 0:
        steps = with_options(read_steps(asked.stderr), options, keep_dir, call.inputs, programs)
    if not isinstance(steps, Steps):
        remove_private(keep_dir)
        return steps
    env = {**environ, **steps.variables, "TMPDIR": keep_dir}    # the tools' own temporary files go
                                                                # too
    # A file, not `sh -c TEXT`: the steps of a call with many inputs pass the
    # kernel's limit on one argument (128 KiB, E2BIG) that nvcc never meets.
    script_path = os.path.join(keep_dir, SCRIPT_NAME)
    try:
        with open(script_path, "w") as out:
            out.write(script(steps, keep_dir, dependency_command(nvcc, call, extra)))
    except OSError as error:
        remove_private(keep_dir)
        return f"the steps could not be written ({error})"
    return Exec(SHELL, [SHELL, script_path], env)

