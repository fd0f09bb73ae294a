"""The drop-in nvcc's decision: read the call, match the ACF, choose the flags.

nvcc_evo.driver.shim runs first and execs the real nvcc (its absolute path as
argv[0], so it finds its toolkit; exec, so exit codes, signals and make's
jobserver descriptors pass through). Nothing of ours goes to stdout. The
user's argv is never rewritten: additions go after it. Anything the wrapper
does not understand is compiled exactly as asked.
"""
from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from nvcc_evo.driver.match.calls import is_lto_link, lto_objects, passthrough_reason, tunable_inputs
from nvcc_evo.driver.match.find import acf_problem, find_acf, untrusted_acf
from nvcc_evo.driver.match.units import STALE_ENV, CallPlan, build_link_plan, build_plan
from nvcc_evo.driver.common import (LOG_ENV, NO_ACF, PHASE_ENV, REAL_NVCC_ENV, NvccNotFound,
                                    append_log,
                                     find_real_nvcc as find_nvcc, find_settings_file, is_self,
                                    stale_problem,
                                     write_log_line)
from nvcc_evo.driver.cmdline.nvcc_options import parse_call
from nvcc_evo.errors import AcfError, EnvironmentProblem, EvoError
from nvcc_evo.system.say import visible

if TYPE_CHECKING:
    from collections.abc import Mapping

    from nvcc_evo.driver.cmdline.flags import FlagPlan
    from nvcc_evo.driver.cmdline.nvcc_options import NvccCall
    from nvcc_evo.driver.settings import Settings
    from nvcc_evo.driver.toolkit import Toolkit

VERBOSE_ENV = "NVCC_EVO_VERBOSE"


def find_real_nvcc(environ: Mapping[str, str] = os.environ) -> Path:
    """The real nvcc (see nvcc_evo.driver.shim), as an EnvironmentProblem if there is none."""
    try:
        return Path(find_nvcc(environ))
    except NvccNotFound as problem:
        raise EnvironmentProblem(str(problem)) from None


def _no_nvcc(environ: Mapping[str, str]) -> str:
    """Why no real nvcc was found (the places that run nvcc-evo itself named)."""
    try:
        find_nvcc(environ)
    except NvccNotFound as problem:
        return f"{problem} (or `nvcc` in the project settings)"
    return ("no real nvcc found: set NVCC_EVO_REAL_NVCC, CUDA_HOME, PATH or `nvcc` in the project "
            "settings")


class Decision(NamedTuple):
    nvcc: Path | None                     # None: no real nvcc, nor one the project settings name
    call_plan: CallPlan
    flags: "FlagPlan | None" = None      # None: passed through before any knob was read
    toolkit: "Toolkit | None" = None
    problems: tuple[str, ...] = ()
    call: "NvccCall | None" = None        # the NvccCall read from argv, for the compile database
    per_step: tuple[tuple[tuple[str, str], "FlagPlan"], ...] = ()   # ((input, arch), ptxas knobs
                                                                    # that differ)
    acf_error: EvoError | None = None     # the AcfError, when the ACF has errors (--explain shows
                                          # them all)
    programs: tuple[tuple[tuple[str, str], str], ...] = ()   # ((input, arch), a ptxas other than
                                                             # nvcc's)
    settings: "Settings | None" = None    # the project's settings (nvcc_evo.driver.settings), where
                                          # a file has them

    def build_environ(self, environ: Mapping[str, str]) -> Mapping[str, str]:
        """The environment the decision was made with: the settings file's
        values where the environment leaves them unset."""
        return self.settings.for_build() if self.settings is not None else environ

    @property
    def extra_args(self) -> tuple[str, ...]:
        return self.flags.flags if self.flags is not None else ()

    def ptxas_options(self) -> dict[tuple[str, str], tuple[str, ...]]:
        """{(input, arch): ptxas options} for the split run; empty when there is none."""
        from nvcc_evo.driver.cmdline.flags import ptxas_values
        options = {key: ptxas_values(plan.flags) for key, plan in self.per_step}
        return options if any(options.values()) or self.programs else {}


def _read_settings(acf_path: Path, nvcc: Path | None,
                   environ: Mapping[str, str]) -> tuple[Settings, tuple[str, ...], Path] | Decision:
    """The project settings beside the ACF, what of them is ignored, and the nvcc they name; or
    the Decision to build untuned where they cannot be used."""
    from nvcc_evo.driver import settings as project
    ignored: tuple[str, ...] = ()
    try:
        found = project.load(acf_path, environ)
        ignored = (f"{found.ignored}; the build goes on without them",) if found.ignored else ()
        return found, ignored, _settings_nvcc(found, nvcc)
    except (project.SettingsError, OSError, EnvironmentProblem) as error:
        error_text = str(error)
        if isinstance(error, OSError):
            error_text = f"{error.filename}: {error.strerror}"
        unusable = CallPlan(acf_path, passthrough="the project settings have errors")
        return Decision(nvcc, unusable,
                        problems=(*ignored, "the project settings cannot be used; building "
                                  f"without tuned flags: {error_text.splitlines()[0]}"),
                        acf_error=None if isinstance(error, OSError) else error)


def decide(argv: list[str], nvcc: Path | None, environ: Mapping[str, str], cwd: Path) -> Decision:
    """Everything the wrapper would add to this call, and why. The common
    cases (nothing to tune, no ACF) return before anything heavy is loaded."""
    call = parse_call(argv, environ, cwd)
    reason = passthrough_reason(call, cwd)
    inputs = lto_objects(call) if is_lto_link(call) else tunable_inputs(call)
    acf_path = None if reason else find_acf([(cwd / i).parent for i in inputs] + [cwd], environ)
    if acf_path is None:
        reason = reason or NO_ACF
        return Decision(nvcc, CallPlan(None, passthrough=reason))
    refused = _refused_acf(nvcc, acf_path, environ)
    if refused is not None:
        return refused
    found: Settings | None = None         # no settings file: nothing more is loaded for it
    ignored: tuple[str, ...] = ()
    if find_settings_file(acf_path) is not None:
        read = _read_settings(acf_path, nvcc, environ)
        if isinstance(read, Decision):
            return read
        found, ignored, nvcc = read
        environ = found.for_build()
    elif nvcc is None:
        return Decision(None, CallPlan(acf_path, passthrough="no real nvcc"),
                        problems=(_no_nvcc(environ),))
    from nvcc_evo.driver.cmdline.compileplan import plan_call
    from nvcc_evo.driver.cmdline.flags import FlagPlan
    from nvcc_evo.driver.toolkit import cache_folder_if_any, load_toolkit
    try:
        toolkit = load_toolkit(nvcc)
    except OSError as error:  # not an nvcc that works (a script that runs nvcc-evo again, say)
        return Decision(nvcc, CallPlan(acf_path, passthrough="the real nvcc does not work"),
                        problems=(*ignored, f"{str(error).splitlines()[0]}; building without "
                                            "tuned flags"))
    try:
        if is_lto_link(call):
            from nvcc_evo.driver.compiledb import by_output
            call_plan = build_link_plan(call, cwd, environ, toolkit, cache_folder_if_any(),
                                        acf_path, by_output(acf_path))
        else:
            call_plan = build_plan(call, cwd, environ, toolkit, cache_folder_if_any(), acf_path)
    except AcfError as error:
        first = error.diagnostics[0]
        more = f" (and {len(error.diagnostics) - 1} more)" if len(error.diagnostics) > 1 else ""
        return Decision(nvcc, CallPlan(acf_path, passthrough="the ACF has errors"), None, toolkit,
                        (*ignored, "the ACF has errors; building without tuned flags: "
                         f"{first.location}: {first.message}{more}"), acf_error=error)
    wrong = stale_problem(environ)        # (the verbs refuse it: the same words)
    if wrong:
        return Decision(nvcc, CallPlan(acf_path, passthrough=f"{STALE_ENV} is not keep or default"),
                        None, toolkit,
                        (*ignored, f"{wrong}; building without tuned flags"))
    planned = plan_call(call, call_plan, environ.get(STALE_ENV) or "keep", toolkit,
                        str(acf_path.parent), environ)
    flags = planned.flags
    return Decision(nvcc, call_plan, FlagPlan(flags.flags, flags.applied, planned.skipped), toolkit,
                    ignored,
                    call=call, per_step=planned.per_step, programs=planned.programs, settings=found)


def _refused_acf(nvcc: Path | None, acf_path: Path,
                 environ: Mapping[str, str]) -> Decision | None:
    """The untuned build of an ACF that is not trusted or cannot be read (None: it can be used)."""
    distrust = untrusted_acf(acf_path, environ)
    if distrust:
        return Decision(nvcc, CallPlan(acf_path, passthrough="the ACF is not trusted"),
                        problems=(f"{distrust}; building without tuned flags",))
    unreadable = acf_problem(acf_path, environ)
    if unreadable:          # (NVCC_EVO_ACF naming nothing must not look like an untuned ACF)
        return Decision(nvcc, CallPlan(acf_path, passthrough="the ACF cannot be read"),
                        problems=(f"{unreadable}; building without tuned flags",))
    return None


def _settings_nvcc(found: Settings, nvcc: Path | None) -> Path:
    """The settings file's `nvcc` where NVCC_EVO_REAL_NVCC is unset (the
    environment wins, and the shim has already followed it)."""
    from nvcc_evo.driver.settings import DEFAULT
    chosen = found.value("nvcc")
    if chosen.source in (DEFAULT, REAL_NVCC_ENV):
        if nvcc is None:
            raise EnvironmentProblem(_no_nvcc(found.environ))
        return nvcc
    path = str(chosen.value)
    if not (os.path.isfile(path) and os.access(path, os.X_OK)) or is_self(path):
        raise EnvironmentProblem(f"{chosen.source}: nvcc = {path} is not an executable nvcc (nor "
                                 "nvcc-evo)")
    return Path(path)


def _record(decision: Decision, argv: list[str], environ: Mapping[str, str], cwd: Path) -> None:
    plan_ = decision.call_plan
    if plan_.acf_path is None or not (plan_.matches or plan_.no_sass):
        return
    if decision.call is None or decision.toolkit is None or decision.call.has("--device-link"):
        return                 # (a call and a toolkit with matches)
    from nvcc_evo.driver import compiledb
    output = decision.call.last("--output-file") or ""
    # A bench command's build of a candidate (--retune --backend command) adds what it compiles,
    # never replacing how the user's own build compiled an output: a bench command may build another
    # way.
    candidate_build = PHASE_ENV in environ
    for match in plan_.matches + plan_.no_sass:
        if match.unit is None:
            continue
        compiledb.record(plan_.acf_path, compiledb.CompileRecord(
            tuple(argv), str(cwd), compiledb.relevant_env(environ), str(decision.nvcc),
            decision.toolkit.version, str((cwd / match.input).resolve()), output,
            match.unit.position,
            match.unit.globs, match.arch, str(match.target) if match.target else None,
            match.fingerprint, tuple(map(str, match.stale)), decision.extra_args, time.time()),
                         keep_existing=candidate_build)


def _log(decision: Decision, argv: list[str], environ: Mapping[str, str], cwd: Path,
         per_step: dict[tuple[str, str], tuple[str, ...]]) -> None:
    path = environ.get(LOG_ENV)
    if path:
        append_log(path, str(cwd), argv, str(decision.call_plan.acf_path or ""),
                   decision.extra_args,
                   decision.call_plan.passthrough,
                   [str(s) for s in (decision.flags.skipped if decision.flags else ())],
                   decision.problems, per_step,
                   [(m.input, m.arch, m.unit.globs)
                    for m in decision.call_plan.matches if m.unit is not None])
    if environ.get(VERBOSE_ENV):
        from shlex import join        # (quoted as a shell takes them: `-DX='unsigned int'`, copied
                                      # as it is)
        each = "".join(f"; ptxas for {name} [{arch}]: {join(o) or '(nothing)'}"
                       for (name, arch), o in per_step.items())
        print(visible(f"nvcc-evo: added: {join(decision.extra_args) or '(nothing)'}{each}"),
              file=sys.stderr)


def launch(argv: list[str], nvcc: str | None) -> tuple[str, list[str], dict, str] | None:
    """What to exec for this compile (program, argv, environment, the real
    nvcc to fall back on): nvcc with
    the common flags added, or, where tuned ptxas knobs differ between the
    call's inputs or architectures, nvcc's own steps with each ptxas given
    its own (nvcc_evo.driver.cmdline.split). Never raises: our own trouble must not break a
    build (it goes to the log, and nvcc runs as asked). `nvcc` None: the shim
    found none; the project settings may name one (None back if not)."""
    environ = os.environ
    plain = (nvcc, [nvcc, *argv], dict(environ), nvcc) if nvcc else None
    try:
        cwd = Path.cwd()
        decision = decide(argv, Path(nvcc) if nvcc else None, environ, cwd)
        if decision.nvcc is None:
            print(visible("nvcc-evo: error: "
                          f"{decision.problems[0] if decision.problems else 'no real nvcc found'}"),
                  file=sys.stderr)
            return None
        nvcc = str(decision.nvcc)               # (the project settings' nvcc, where they name one)
        build_env = decision.build_environ(environ)
        problems = list(decision.problems)
        chosen = (nvcc, [nvcc, *argv, *decision.extra_args], dict(environ))
        options = decision.ptxas_options()
        if options and decision.call is not None:  # (options come with the call they are for)
            from nvcc_evo.driver.cmdline.split import plan_launch
            split = plan_launch(nvcc, decision.call, list(decision.extra_args), options, environ,
                                dict(decision.programs))
            if isinstance(split, str):
                problems.append(f"ptxas options per input and architecture not applied: {split}")
            if split is None or isinstance(split, str):      # None: nvcc refuses the call, and will
                                                             # say why
                options = {}
            else:
                chosen = split
        try:
            _record(decision, argv, build_env, cwd)
        except OSError as error:  # the tuned build goes on; only --retune loses this record
            problems.append(f"cannot record this compile for --retune ({error}); the tuned flags "
                            "still apply")
        for problem in problems:
            print(visible(f"nvcc-evo: warning: {problem}"), file=sys.stderr)
        _log(decision._replace(problems=tuple(problems)), argv, build_env, cwd, options)
        return (*chosen, nvcc)
    except KeyboardInterrupt:
        raise
    except Exception as error:     # (an OSError: a program or file not what it should be, said in
                                   # its words)
        said = str(error) if isinstance(error, OSError) else f"internal error ({error!r})"
        print(visible(f"nvcc-evo: warning: {said}; compiling exactly as nvcc would, without "
                      "tuned flags"),
              file=sys.stderr)
        if environ.get(LOG_ENV):
            write_log_line(environ[LOG_ENV],
                           json.dumps({"internal_error": repr(error), "argv": argv}))
        return plain
