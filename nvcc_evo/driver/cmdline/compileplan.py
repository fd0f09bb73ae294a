"""The compile plan: which knob values of an ACF reach the code of each
(input, architecture) a call builds, as flags, and what is left out and why.

One plan, two users. The wrapper (`plan_call`, from `wrapper.decide`) adds
the plan's common flags to the user's call and gives each ptxas step its own
(nvcc_evo.driver.cmdline.split). A retune (`RecordedBuild`) asks the same function
what a build would make of a candidate's knobs, for the recorded call with
the candidate standing in for the unit's entry of the target architecture:
the flags a candidate is compiled with are the flags that step of the build
gets, and a knob the build would not pass is known before it is searched.
A PTX that a program compiles itself (Triton's kernels, through the
drop-in ptxas nvcc_evo.driver.dropin_ptxas) has one ptxas step, `ptx_step`:
the drop-in's command and a kernel unit's candidates (retune.scope.reach) both
come from it.

Rules of the plan, each in one place:
- ptxas knobs go to each ptxas step (per input and architecture) where nvcc's
  steps can be split (`split.why_not`); else only values shared by every step
  apply;
- defines and nvcc options reach every architecture's code and the host code
  of the call (the host is compiled once): one value per call. An
  architecture the call builds with no entry of its unit takes the value of
  the entries that exist (it has none of its own), so a define tuned for
  the GPU at hand reaches every architecture of a multi-architecture call;
  entries that disagree, or inputs of other units that give it another value,
  leave it out, said;
- the user's own flags win, in every spelling (nvcc_evo.driver.cmdline.flags).
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from nvcc_evo.driver.match.index import TargetEntry
from nvcc_evo.driver.match.units import CallPlan, build_plan
from nvcc_evo.driver.cmdline.flags import (CallFacts, FlagPlan, Skipped, plan_flags, ptxas_facts,
                                           read_facts)

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping, Sequence

    from nvcc_evo.driver.cmdline.nvcc_options import NvccCall
    from nvcc_evo.driver.match.units import Match
    from nvcc_evo.driver.toolkit import Toolkit

Step = tuple[str, str]         # (input as the call names it, sm_XX)


class CompilePlan(NamedTuple):
    """What a call gets: `flags` added to its argv (shared by every step),
    per-step ptxas knobs and programs, and every knob left out with why."""

    flags: FlagPlan
    per_step: tuple[tuple[Step, FlagPlan], ...] = ()
    programs: tuple[tuple[Step, str], ...] = ()

    @property
    def skipped(self) -> tuple[Skipped, ...]:
        """Every knob left out: the call's, then each ptxas step's (its step named)."""
        return self.flags.skipped + tuple(left._replace(step=step)
                                          for step, plan in self.per_step
                                          for left in plan.skipped)

    def step(self, key: Step) -> FlagPlan:
        """What reaches one ptxas step's code: the common flags and its own
        (applied knobs and flags), and what was left out of either."""
        own = dict(self.per_step).get(key, FlagPlan((), (), ()))
        return FlagPlan(self.flags.flags + own.flags, self.flags.applied + own.applied,
                        self.flags.skipped + own.skipped)

    def program(self, key: Step) -> str | None:
        return dict(self.programs).get(key)


def plan_call(call: NvccCall, call_plan: CallPlan, policy: str, toolkit: Toolkit, acf_dir: str,
              environ: Mapping[str, str]) -> CompilePlan:
    """The flags of a call whose matches (`call_plan`) hold the knob values of
    each (input, arch)."""
    from nvcc_evo.acf import knobs
    from nvcc_evo.acf.knobs import STEP_ONLY
    settings, dropped = common_settings(call_plan, policy)
    for name in STEP_ONLY & set(settings):
        dropped.append(Skipped(name, f"{name}={settings.pop(name)} is given to each ptxas step "
                                     "on its own"))
    facts = read_facts(call)
    if facts.werror and _checks_ptx(call):
        for name in knobs.CAPS_OF_KERNELS & set(settings):
            dropped.append(Skipped(name, f"{name}={settings.pop(name)} is given to each ptxas "
                                         "step on its own: nvcc's PTX check step (ptxas "
                                         "-arch=compute_XX, for -arch=sm_XXa) refuses a register "
                                         "cap (\"Too big maxrregcount value\"), an error with "
                                         "-Werror"))
    steps_caps = {k: v for m in call_plan.matches for k, v in m.settings(policy).items()
                  if k in knobs.CAPS_OF_KERNELS and k not in settings}   # (what each ptxas step
                                                                         # may add)
    flags = plan_flags(settings, facts, toolkit, acf_dir, beside=steps_caps)
    per_step, dropped = _per_step(call, call_plan, policy, dropped, facts, toolkit, acf_dir,
                                  settings)
    programs = []
    if any(name in STEP_ONLY for _, plan in per_step for name, _ in plan.applied):
        from nvcc_evo.driver.cmdline.ptxas import settle      # (only for units that choose a ptxas
                                                              # or a controls file)
        settled = []
        for (name, arch), plan in per_step:
            program, plan = settle(plan, toolkit, environ, arch, acf_dir)
            settled.append(((name, arch), plan))
            programs += [((name, arch), program)] if program else []
        per_step = tuple(settled)
    return CompilePlan(FlagPlan(flags.flags, flags.applied, tuple(dropped) + flags.skipped),
                       per_step,
                       tuple(programs))


def _checks_ptx(call: NvccCall) -> bool:
    """`-arch=sm_90a` (or sm_100f...) makes nvcc run ptxas on the PTX for
    compute_90 too, and that run warns of any -maxrregcount (with -Werror
    the warning fails the build)."""
    return any(re.fullmatch(r"sm_[0-9]+[af]", value) for value in call.values("--gpu-architecture"))


def common_settings(plan: CallPlan, stale_policy: str) -> tuple[dict, list[Skipped]]:
    """Knob values shared by every (input, arch) of the call, and those that
    differ (flags apply per call, or per ptxas run). An architecture with no
    entry of its unit has no say in a define's or an nvcc option's value
    when another architecture of the same input has an entry."""
    if not plan.matches:
        return {}, []
    each = [m.settings(stale_policy) for m in plan.matches]
    entered = {m.input for m in plan.matches if m.unit is not None and m.target is not None}
    names = sorted(set().union(*each))
    common, dropped = {}, []
    for name in names:
        call_wide = not name.startswith("ptxas.")
        voters = [(m, s) for m, s in zip(plan.matches, each)
                  if not (call_wide and m.target is None and m.input in entered)]
        values = [s.get(name, None) for _, s in voters]
        if all(v == values[0] for v in values) and values[0] is not None:
            common[name] = values[0]
        else:
            where = ", ".join(f"{m.input}/{m.arch}={s.get(name, 'default')}" for m, s in voters)
            dropped.append(Skipped(name, f"differs within this call ({where})"))
    return common, dropped


def _per_step(call: NvccCall, call_plan: CallPlan, policy: str, dropped: list[Skipped],
              facts: CallFacts, toolkit: Toolkit, acf_dir: str, common: dict
              ) -> tuple[tuple[tuple[Step, FlagPlan], ...], list[Skipped]]:
    """ptxas knobs whose values differ between the call's inputs or
    architectures, and those only a ptxas step takes (its program, its
    controls file), go to each ptxas step on its own (nvcc_evo.driver.cmdline.split)
    where the call allows it; every other knob that differs stays out, with
    the reason."""
    from nvcc_evo.acf import knobs
    ptxas = {s.knob for s in dropped if getattr(knobs.lookup(s.knob), "family", "") == "ptxas"}
    if not ptxas:
        return (), [s._replace(why=f"{s.why}; compile them separately to tune each")
                    for s in dropped]
    from nvcc_evo.driver.cmdline.split import why_not      # (subprocess and tempfile: only for
                                                           # calls that need them)
    why = why_not(call)
    per_step = []
    if not why:
        for match in call_plan.matches:
            chosen = {k: v for k, v in match.settings(policy).items() if k in ptxas}
            per_step.append(((match.input, match.arch),
                             plan_flags(chosen, facts, toolkit, acf_dir, common)))
    left = [s._replace(why=f"{s.why}; not given per ptxas step: {why}" if s.knob in ptxas else
                       f"{s.why}; compile them separately to tune each")
            for s in dropped if not (per_step and s.knob in ptxas)]
    return tuple(per_step), left


# ---------------------------------------------------------------- a retune's view
class RecordedBuild:
    """The call a unit's build makes (its compile-database record, or
    `nvcc -c SOURCE -arch=sm_XX` when it has none), matched against the ACF
    once: `step(settings)` is what the build would pass to the target's
    step if the unit's entry for `arch` held `settings`."""

    def __init__(self, argv: Sequence[str], cwd: str, env: dict[str, str], source: str, arch: str,
                 unit_globs: tuple[str, ...], acf_path: Path, toolkit: Toolkit,
                 environ: Mapping[str, str]):
        from nvcc_evo.driver.cmdline.nvcc_options import parse_call
        from nvcc_evo.driver.toolkit import cache_folder_if_any
        call = parse_call(list(argv), dict(env), cwd)
        if not (call.has("--gpu-architecture") or call.has("--generate-code") or
                call.has("--gpu-code")):
            # (no record: the candidates' architecture)
            call = parse_call([*argv, f"-arch={arch}"], dict(env), cwd)
        self.call, self.arch, self.globs = call, arch, tuple(unit_globs)
        self.acf_dir, self.toolkit, self.environ = str(acf_path.parent), toolkit, environ
        self.base = build_plan(call, Path(cwd), environ, toolkit, cache_folder_if_any(), acf_path)
        mine = [m for m in self.base.matches if m.unit is not None and m.unit.globs == self.globs]
        named = [m.input
                 for m in mine if (Path(cwd) / m.input).resolve() == (Path(cwd) / source).resolve()]
        self.input = named[0] if named else source
        self.builds_arch = arch in self.base.archs

    def call_values(self) -> dict:
        """Defines and nvcc options that every other architecture's entry of
        the input sets to one value: the call has one value for each, so the
        target's entry must give the same (else none of them reaches)."""
        others = [dict(m.settings("keep")) for m in self.base.matches
                  if m.unit is not None and m.unit.globs == self.globs and m.input == self.input
                  and m.arch != self.arch and m.target is not None]
        if not others:
            return {}
        names = set(others[0]).intersection(*others[1:])
        return {k: others[0][k] for k in sorted(names)
                if not k.startswith("ptxas.") and all(o[k] == others[0][k] for o in others)}

    def plan(self, settings: dict) -> CompilePlan:
        matches = tuple(self._standing_in(m, settings) for m in self.base.matches)
        call_plan = self.base._replace(matches=matches)
        return plan_call(self.call, call_plan, "keep", self.toolkit, self.acf_dir, self.environ)

    def step(self, settings: dict) -> tuple[FlagPlan, str | None]:
        """The flags (and the ptxas program, None for nvcc's) that reach the
        target's code with `settings` as the unit's entry for the arch."""
        plan = self.plan(settings)
        key = (self.input, self.arch)
        return plan.step(key), plan.program(key)

    def _standing_in(self, match: Match, settings: dict) -> Match:
        if match.unit is None or match.unit.globs != self.globs or match.arch != self.arch:
            return match
        entry = TargetEntry(self.arch, None, 0, tuple(settings.items()))
        return match._replace(target=entry, stale=())


# ---------------------------------------------------------------- a PTX's ptxas step
def ptx_step(settings: dict, options: Iterable[str], real: str, arch: str,
             environ: Mapping[str, str], acf_dir: str) -> tuple[FlagPlan, str]:
    """The ptxas step of a PTX a program compiles itself (nvcc-evo-ptxas's
    command; a kernel unit's candidates): the entry's knobs as ptxas options
    with the call's own `options` winning (flags.ptxas_facts), the ptxas that
    runs (`ptxas.version` among `real` and NVCC_EVO_PTXAS's, a controls file
    tried on it) and only options it takes silently (ptxas.accepted). One
    ptxas run per PTX: nothing is shared with another architecture. The
    FlagPlan (nvcc's spelling, -Xptxas OPTION) and the program."""
    from nvcc_evo.driver.cmdline.ptxas import accepted
    plan = plan_flags(settings, ptxas_facts(options), None, acf_dir)
    program, plan = accepted(plan, real, arch, environ, acf_dir)
    return plan, program
