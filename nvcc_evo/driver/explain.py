"""`nvcc-evo --explain <nvcc args>`: what the wrapper would do, and why."""
from __future__ import annotations

import os
import shlex
from pathlib import Path

from nvcc_evo.acf.edit.spelling import show_value
from nvcc_evo.driver.cmdline.flags import DEFAULT_PASSES_NOTHING, ptxas_values
from nvcc_evo.driver.match.builds import changed_sources, sources_read
from nvcc_evo.driver.match.find import named_acf_problem
from nvcc_evo.driver.match.units import Match
from nvcc_evo.driver.match.stale import Reason, ReasonKind, source_digests
from nvcc_evo.driver.settings import Settings, load
from nvcc_evo.driver.specs import BUILD_KEYS, REPORT_KEYS, RETUNE_KEYS
from nvcc_evo.driver.wrapper import Decision, decide, find_real_nvcc
from nvcc_evo.errors import EnvironmentProblem
from nvcc_evo.system.programs import said


def report(decision: Decision) -> str:
    plan = decision.call_plan
    toolkit = f" (CUDA {decision.toolkit.version})" if decision.toolkit else ""
    lines = [f"real nvcc: {decision.nvcc}{toolkit}"]
    lines += [f"problem: {p}" for p in decision.problems]
    if plan.passthrough:
        lines.append(f"pass-through: {plan.passthrough}")
        return "\n".join(lines) + "\n"
    flags = decision.flags
    assert flags is not None                   # (wherever nothing passes through)
    lines.append(f"ACF: {plan.acf_path}")
    lines += _settings_lines(decision.settings or _no_file(plan.acf_path), decision.nvcc)
    lines.append(f"SASS targets: {', '.join(plan.archs) or 'none'}")
    lines += [f"note: {n}" for n in plan.notes]
    for match in plan.matches:
        if match.unit is None:
            lines.append(f"{match.input} [{match.arch}]: {match.note}")
            continue
        target = "no target"
        if match.target:
            target = f"target {match.target} (line {match.target.line})"
        lines.append(f"{match.input} [{match.arch}]: unit {match.unit} (line {match.unit.line}), "
                     f"{target}")
        if match.note:
            lines.append(f"    {match.note}")
        for why in match.stale:
            lines.append(f"    stale: {_with_files(why, match, decision, plan.acf_path)}")
        lines.append(f"    fingerprint {match.fingerprint}")
    # (as a shell takes them)
    lines.append("would add: " + (shlex.join(decision.extra_args) or "(nothing)"))
    for knob, value in flags.applied:
        lines.append(f"    {knob} = {show_value(value)}")
    if decision.ptxas_options():           # (all empty: the user set them all, nothing runs split)
        lines.append("per input and architecture, at each ptxas step (nvcc's own steps run split):")
        programs = dict(decision.programs)
        for (name, arch), step in decision.per_step:
            given = ", ".join(f"{knob} = {show_value(value)}"
                              for knob, value in step.applied) or "(nothing)"
            ran_by = f"   (run by {programs[name, arch]})" if (name, arch) in programs else ""
            lines.append(f"    {name} [{arch}]: "
                         f"{shlex.join(ptxas_values(step.flags)) or '(nothing)'}   [{given}]"
                         + ran_by)
    defaults = [s for s in flags.skipped if s.why == DEFAULT_PASSES_NOTHING]
    lost = [s for s in flags.skipped if s.why != DEFAULT_PASSES_NOTHING]
    if lost:  # an entry's knob that this build does not pass: what was measured would not ship
        lines.append("not reaching the binary (the ACF sets them, this build does not pass them):")
        lines += [f"    error: {s}" for s in lost]
    if defaults:
        lines.append("skipped:")
        lines += [f"    {s}" for s in defaults]
    lines += _reconfiguring(decision, Path.cwd())
    return "\n".join(lines) + "\n"


def _with_files(why: Reason, match: Match, decision: Decision, acf_path: Path | None) -> Reason:
    """A changed source's reason with the files that changed since the entry's fingerprint, where
    a retune kept what it read (match.builds.keep_sources); any other reason as it is."""
    if why.kind is not ReasonKind.SOURCE or match.target is None:
        return why
    if not match.target.fingerprint or decision.call is None or acf_path is None:
        return why
    cwd, root = str(Path.cwd()), acf_path.parent
    now = sources_read(Path(cwd) / match.input, decision.call.argv, tuple(os.environ.items()), cwd,
                       root)
    return why._replace(files=tuple(changed_sources(root, match.target.fingerprint, now)))


REGISTER_CAPS = ("ptxas.maxrregcount", "nvcc.maxrregcount")


def _reconfiguring(decision: Decision, cwd: Path) -> list[str]:
    """A warning for each input given a register cap that overrides launch bounds whose sources (the
    unit and the headers it includes with quotes, as its fingerprint reads them) use setmaxnreg: a
    kernel whose warp groups move registers hangs under a cap below the registers it launches with,
    and ptxas says nothing. Nothing is compiled here: `--sass` builds it and says whether a kernel
    is capped so (retune.scope.caps.hangs)."""
    assert decision.flags is not None          # (a call that passes through returned before)
    steps = dict(decision.per_step)
    warned = []
    for match in dict.fromkeys(m.input for m in decision.call_plan.matches if m.unit is not None):
        own = [step.applied for (name, _), step in steps.items() if name == match]
        applied = dict(decision.flags.applied) | {k: v for pairs in own for k, v in pairs}
        caps = {k: v for k, v in applied.items() if k in REGISTER_CAPS}
        if not caps or applied.get("ptxas.override_directive_values") is not True:
            continue           # (without the override, launch bounds keep their registers: no cap
                               # reaches it)
        sources = source_digests(cwd / match, decision.call, cwd)
        users = [p for p in sources if _mentions(p, b"setmaxnreg")]
        if users:
            shown = ", ".join(f"{k} = {show_value(v)}" for k, v in caps.items())
            warned.append(f"warning: {match}: {shown} with ptxas.override_directive_values, and "
                          f"its sources use setmaxnreg ({users[0]}): a kernel whose warp groups "
                          "move registers hangs under a cap below the registers it launches with "
                          "(ptxas says nothing); `nvcc-evo --sass` builds it and says whether "
                          "one does")
    return warned


def _mentions(path: str, word: bytes) -> bool:
    try:
        return word in Path(path).read_bytes()
    except OSError:
        return False


def _no_file(acf_path: Path | None) -> Settings:
    return load(acf_path, os.environ)  # (no file: every value from the environment or the defaults)


def _settings_lines(settings: Settings | None, nvcc: Path | None) -> list[str]:
    """Each build setting with its value and where it came from (the retune's in --retune
    --dry-run)."""
    if settings is None:
        return []
    head = f"settings: {settings.path}"
    if not settings.path:
        head = ("settings: no nvcc-evo.toml beside the ACF, no [tool.nvcc-evo] in a pyproject.toml "
                "at or above it")
    lines = settings.described(BUILD_KEYS)
    lines[0] = lines[0].replace("(unset) (built-in default)", f"{nvcc} (built-in default: "
                                                              "CUDA_HOME, CUDA_PATH, PATH)")
    lines += settings.described(RETUNE_KEYS + REPORT_KEYS)
    return [head] + [f"    {line}" for line in lines]


def explain(argv: list[str]) -> str:
    """The report; an ACF named by NVCC_EVO_ACF that cannot be read is an
    error here (a build warns and compiles untuned), and an ACF with errors
    is reported, then raised with every diagnostic."""
    try:
        nvcc, missing = find_real_nvcc(), None
    except EnvironmentProblem as error:       # the project settings beside an ACF may name one
        nvcc, missing = None, error
    problem = named_acf_problem(os.environ)
    if problem:
        raise EnvironmentProblem(problem)
    decision = decide(argv, nvcc, os.environ, Path.cwd())
    if decision.nvcc is None:
        raise missing or EnvironmentProblem(decision.problems[0])
    ran = f"programs run: {said()}\n"     # (it compiles nothing, but probes the toolkit a settings
                                          # file may name)
    if decision.acf_error is not None:      # every located error, after the report (exit 1, like
                                            # --acf-check)
        print(report(decision) + ran, end="", flush=True)
        raise decision.acf_error
    return report(decision) + ran
