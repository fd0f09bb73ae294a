"""The drop-in nvcc: read the call, add the ACF's flags, exec the real nvcc.

Nothing of ours goes to stdout. The real nvcc gets its absolute path as
argv[0] (it finds its toolkit from there) and replaces this process, so exit
codes, signals and make's jobserver descriptors pass through untouched. The
user's argv is never rewritten: additions go after it. Anything the wrapper
does not understand is compiled exactly as asked.
"""
from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from nvcc_evo import plan as planning
from nvcc_evo.errors import AcfError, EnvironmentProblem, ExitCode
from nvcc_evo.nvcc_options import parse_call

if TYPE_CHECKING:
    from nvcc_evo.flags import FlagPlan

REAL_NVCC_ENV = "NVCC_EVO_REAL_NVCC"
GUARD_ENV = "NVCC_EVO_ACTIVE"
LOG_ENV = "NVCC_EVO_LOG"
VERBOSE_ENV = "NVCC_EVO_VERBOSE"


def _is_self(candidate: Path) -> bool:
    me = Path(sys.argv[0]).resolve() if sys.argv and sys.argv[0] else None
    try:
        resolved = candidate.resolve()
        if me is not None and resolved == me:
            return True
        with open(resolved, "rb") as handle:
            return b"nvcc_evo" in handle.read(1024)   # a console-script shim of ours
    except OSError:
        return False


def _usable(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK) and not _is_self(path)


def find_real_nvcc(environ=os.environ) -> Path:
    """Explicit setting, else CUDA_HOME/CUDA_PATH, else PATH; never ourselves."""
    explicit = environ.get(REAL_NVCC_ENV)
    if explicit:
        path = Path(explicit)
        if not (path.is_file() and os.access(path, os.X_OK)):
            raise EnvironmentProblem(f"{REAL_NVCC_ENV}={explicit} is not an executable file")
        if _is_self(path):
            raise EnvironmentProblem(f"{REAL_NVCC_ENV}={explicit} points at nvcc-evo itself")
        return path.absolute()
    for variable in ("CUDA_HOME", "CUDA_PATH"):
        root = environ.get(variable)
        if root and _usable(Path(root) / "bin" / "nvcc"):
            return (Path(root) / "bin" / "nvcc").absolute()
    for folder in environ.get("PATH", "").split(os.pathsep):
        path = Path(folder or ".") / "nvcc"
        if _usable(path):
            return path.absolute()
    raise EnvironmentProblem(f"no real nvcc found: set {REAL_NVCC_ENV}, CUDA_HOME or PATH")


@dataclass(frozen=True)
class Decision:
    nvcc: Path
    call_plan: planning.CallPlan
    flags: "FlagPlan | None" = None      # None: passed through before any knob was read
    toolkit: object = None
    problems: tuple[str, ...] = field(default=())

    @property
    def extra_args(self) -> tuple[str, ...]:
        return self.flags.flags if self.flags is not None else ()


def decide(argv: list[str], nvcc: Path, environ, cwd: Path) -> Decision:
    """Everything the wrapper would add to this call, and why. The common
    cases (nothing to tune, no ACF) return before anything heavy is loaded."""
    call = parse_call(argv, environ)
    reason = planning.passthrough_reason(call, cwd)
    inputs = planning.lto_objects(call) if planning.is_lto_link(call) else planning.tunable_inputs(call)
    acf_path = None if reason else planning.find_acf([(cwd / i).parent for i in inputs] + [cwd], environ)
    if acf_path is None:
        reason = reason or f"no {planning.ACF_NAME} above the inputs or here, and {planning.ACF_ENV} unset"
        return Decision(nvcc, planning.CallPlan(None, passthrough=reason))
    from nvcc_evo.flags import FlagPlan, plan_flags, read_facts
    from nvcc_evo.toolkit import cache_folder, load_toolkit
    toolkit = load_toolkit(nvcc)
    try:
        if planning.is_lto_link(call):
            from nvcc_evo.compiledb import by_output
            call_plan = planning.build_link_plan(call, cwd, environ, toolkit, cache_folder(), acf_path,
                                                 by_output(acf_path))
        else:
            call_plan = planning.build_plan(call, cwd, environ, toolkit, cache_folder(), acf_path)
    except AcfError as error:
        first = error.diagnostics[0]
        more = f" (and {len(error.diagnostics) - 1} more)" if len(error.diagnostics) > 1 else ""
        return Decision(nvcc, planning.CallPlan(acf_path, passthrough="the ACF has errors"), None, toolkit,
                        (f"the ACF has errors; building without tuned flags: {first.location}: "
                         f"{first.message}{more}",))
    policy = environ.get(planning.STALE_ENV, "keep")
    settings, dropped = planning.common_settings(call_plan, policy)
    flags = plan_flags(settings, read_facts(call), toolkit)
    flags = FlagPlan(flags.flags, flags.applied, tuple(dropped) + flags.skipped)
    return Decision(nvcc, call_plan, flags, toolkit)


def _record(decision: Decision, argv: list[str], environ, cwd: Path) -> None:
    plan_ = decision.call_plan
    if plan_.acf_path is None or not plan_.matches or "--device-link" in parse_call(argv, environ).all_names():
        return
    from nvcc_evo import compiledb
    output = parse_call(argv, environ).last("--output-file") or ""
    for match in plan_.matches:
        if match.unit is None:
            continue
        compiledb.record(plan_.acf_path, compiledb.CompileRecord(
            tuple(argv), str(cwd), compiledb.relevant_env(environ), str(decision.nvcc),
            decision.toolkit.version, str((cwd / match.input).resolve()), output, match.unit.index,
            match.unit.globs, match.arch, str(match.target) if match.target else None,
            match.fingerprint, match.stale, decision.extra_args, time.time()))


def _log(decision: Decision, argv: list[str], environ, cwd: Path) -> None:
    line = {"time": time.strftime("%Y-%m-%dT%H:%M:%S"), "cwd": str(cwd), "argv": argv,
            "acf": str(decision.call_plan.acf_path or ""), "added": list(decision.extra_args),
            "passthrough": decision.call_plan.passthrough,
            "skipped": [f"{k}: {why}" for k, why in (decision.flags.skipped if decision.flags else ())],
            "problems": list(decision.problems)}
    path = environ.get(LOG_ENV)
    if path:
        with open(path, "a") as log:
            log.write(json.dumps(line) + "\n")
    if environ.get(VERBOSE_ENV):
        print(f"nvcc-evo: added: {' '.join(decision.extra_args) or '(nothing)'}", file=sys.stderr)


def run_wrapper(argv: list[str]) -> int:
    environ = os.environ
    if environ.get(GUARD_ENV):
        print(f"nvcc-evo: error: nvcc-evo called itself as nvcc; set {REAL_NVCC_ENV} to the real nvcc",
              file=sys.stderr)
        return ExitCode.ENVIRONMENT
    try:
        nvcc = find_real_nvcc()
    except EnvironmentProblem as problem:
        print(f"nvcc-evo: error: {problem}", file=sys.stderr)
        return ExitCode.ENVIRONMENT
    extra: tuple[str, ...] = ()
    try:
        cwd = Path.cwd()
        decision = decide(argv, nvcc, environ, cwd)
        for problem in decision.problems:
            print(f"nvcc-evo: warning: {problem}", file=sys.stderr)
        _record(decision, argv, environ, cwd)
        _log(decision, argv, environ, cwd)
        extra = decision.extra_args
    except KeyboardInterrupt:
        raise
    except Exception as error:   # never break a build over our own trouble
        if environ.get(LOG_ENV):
            with open(environ[LOG_ENV], "a") as log:
                log.write(json.dumps({"internal_error": repr(error), "argv": argv}) + "\n")
    os.environ[GUARD_ENV] = "1"
    os.execv(nvcc, [str(nvcc), *argv, *extra])
