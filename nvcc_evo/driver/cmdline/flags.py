"""Flag mapping stage: knob settings -> nvcc arguments, with the user's own
flags, debug builds, spills-as-errors and the toolkit's abilities respected.

Every knob that is not passed on gets a reason, for `--explain` and the log.
"""
from __future__ import annotations

import os
import re
from typing import TYPE_CHECKING, NamedTuple

from nvcc_evo.acf import knobs
from nvcc_evo.acf.knobs import Form, Kind, Needs, Scalar

if TYPE_CHECKING:
    from collections.abc import Iterable

    from nvcc_evo.driver.cmdline.nvcc_options import NvccCall, Opt
    from nvcc_evo.driver.toolkit import Toolkit

DEFAULT_PASSES_NOTHING = "the toolkit's default; nothing to pass"
PTXAS_DEBUG = {"-g", "--device-debug"}
PTXAS_WERROR = {"-Werror", "--warning-as-error"}
PTXAS_SPILL_WARNING = {"-warn-spills", "--warn-on-spills"}


class CallFacts(NamedTuple):
    """What the user's command line says, as far as knobs care."""

    user_knobs: dict[str, str]       # knob -> the user's spelling that owns it
    debug: bool
    spills_are_errors: bool
    relocatable: bool
    lto: bool = False                # a compile for link-time optimisation
                                     # (match.calls.is_lto_compile)
    werror: bool = False             # ptxas's warnings are errors (-Werror, -Xptxas
                                     # --warning-as-error)


class Skipped(NamedTuple):
    """A knob an entry sets that a plan does not pass, and why: made where the plan is built, so
    that a reader asks its knob (`knob`) and never parses the words a person reads (`str()`)."""

    knob: str
    why: str
    step: tuple[str, str] | None = None   # (input, sm_XX): of one ptxas step; None: the call's

    @property
    def shown(self) -> str:
        """The knob as a person reads it: with its step, where it is one step's."""
        if self.step is None:
            return self.knob
        name, arch = self.step
        return f"{self.knob} ({name} [{arch}])"

    def __str__(self) -> str:
        return f"{self.shown}: {self.why}"


class FlagPlan(NamedTuple):
    flags: tuple[str, ...]
    applied: tuple[tuple[str, Scalar], ...]
    skipped: tuple[Skipped, ...]

    def __str__(self) -> str:
        return " ".join(self.flags) if self.flags else "(no flags)"


def ptxas_tokens(call: NvccCall) -> list[str]:
    """Each ptxas option the user passes, however it was spelled."""
    tokens: list[str] = []
    for item in call.values("--ptxas-options"):
        tokens.extend(t.strip('"') for t in item.split())
    return tokens


def ptxas_values(flags: tuple[str, ...]) -> tuple[str, ...]:
    """The ptxas options in one of our flag lists (the values after each -Xptxas)."""
    return tuple(flags[i + 1] for i, flag in enumerate(flags[:-1]) if flag == "-Xptxas")


def _ptxas_knob(token: str) -> str | None:
    name = token.split("=", 1)[0]
    if re.fullmatch(r"-O[0-9]", name):
        return "ptxas.opt_level"
    for knob in knobs.KNOBS:
        if knob.family == "ptxas" and name in knob.names:
            return knob.name
    return None


def _owned(found: dict[str, str]) -> dict[str, str]:
    """Spread ownership across knobs that set the same control."""
    owned = dict(found)
    for group in knobs.SAME_CONTROL:
        for name in group & set(found):
            for other in group:
                owned.setdefault(other, found[name])
    return owned


MACRO_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
HOST_MACRO = re.compile(r"-[DU](.*)", re.S)


def user_macros(opt: Opt) -> list[tuple[str, str]]:
    """The macros an option defines or undefines, (name, as the user spelled
    it): `-D`/`-U` (a function-like `V(x)=x` defines V), and the host
    compiler's `-Xcompiler -DV=7` in any spelling (nvcc hands those to every
    preprocessing step, device code's too)."""
    if opt.name in ("--define-macro", "--undefine-macro"):
        items = [(item, f"-D/-U {item}") for item in opt.items()]
    elif opt.name == "--compiler-options":
        held = [HOST_MACRO.fullmatch(word.strip('"')) for item in opt.items()
                for word in item.split()]
        items = [(m.group(1), f"-Xcompiler {m.group(0)}") for m in held if m]
    else:
        return []
    named = [(MACRO_NAME.match(text.strip()), spelled) for text, spelled in items]
    return [(name.group(0), spelled) for name, spelled in named if name]


def read_facts(call: NvccCall) -> CallFacts:
    from nvcc_evo.driver.match.calls import is_lto_compile
    found: dict[str, str] = {}
    tokens = ptxas_tokens(call)
    for token in tokens:
        knob = _ptxas_knob(token)
        if knob is not None:
            found.setdefault(knob, f"-Xptxas {token}")
    nvcc_names = {name: k.name for k in knobs.KNOBS if k.family == "nvcc" for name in k.names}
    for opt in call.all_options():
        if opt.name in nvcc_names:
            found.setdefault(nvcc_names[opt.name], opt.name)
        for implied in knobs.IMPLIED_BY.get(opt.name, ()):
            found.setdefault(implied, opt.name)
        for name, spelled in user_macros(opt):
            found.setdefault(knobs.DEFINE_PREFIX + name, spelled)
    debug = call.has("--device-debug") or bool(PTXAS_DEBUG & set(tokens))
    werror = bool(PTXAS_WERROR & set(tokens)) or call.has("--Werror")
    spills = werror and bool(PTXAS_SPILL_WARNING & set(tokens))
    relocatable = call.has("--device-c") or call.last("--relocatable-device-code") == "true"
    return CallFacts(_owned(found), debug, spills, relocatable, is_lto_compile(call), werror)


def ptxas_facts(tokens: Iterable[str]) -> CallFacts:
    """The user's own knobs and hazards from a ptxas command line's options
    (a program that runs ptxas itself: Triton's `--fmad=false`, `-O0`)."""
    found: dict[str, str] = {}
    for token in tokens:
        knob = _ptxas_knob(token)
        if knob is not None:
            found.setdefault(knob, token)
    given = set(tokens)
    werror = bool(PTXAS_WERROR & given)
    spills = werror and bool(PTXAS_SPILL_WARNING & given)
    return CallFacts(_owned(found), bool(PTXAS_DEBUG & given), spills,
                     bool({"-c", "--compile-only"} & given),
                     werror=werror)


def flag_text(knob_name: str, value: Scalar, acf_dir: str | None = None) -> list[str]:
    """The nvcc arguments for one knob value (empty at the toolkit default,
    and for the knob that chooses the ptxas program). A file is named by its
    absolute path: a build runs in a folder of its own, not the ACF's."""
    if knobs.is_define(knob_name):
        return [f"-D{knob_name[len(knobs.DEFINE_PREFIX):]}={knobs.define_text(value)}"]
    knob = knobs.lookup(knob_name)
    assert knob is not None                    # (a checked ACF: every knob is known)
    value = knob.normalise(value)
    if (knob.default is not None and
        value == knob.normalise(knob.default)) or knob.form is Form.TOOL:
        return []
    if knob.kind is Kind.FILE:
        assert acf_dir is not None             # (plan_flags skips file knobs without it)
        value = os.path.join(acf_dir, str(value))
    if knob.form is Form.SWITCH:
        spelled = knob.spelling if value else None
    else:
        spelled = knob.spelling.format(str(value).lower() if isinstance(value, bool) else value)
    if spelled is None:
        return []
    return ["-Xptxas", spelled] if knob.family == "ptxas" else [spelled]


def _skip_reason(knob_name: str, value: Scalar, facts: CallFacts,
                 toolkit: Toolkit | None) -> str | None:
    if knob_name in facts.user_knobs:
        return f"the user sets it ({facts.user_knobs[knob_name]}); the user wins"
    if knobs.is_define(knob_name):
        return knobs.define_value_problem(value)      # (the check refuses these; a second guard)
    knob = knobs.lookup(knob_name)
    assert knob is not None                    # (a checked ACF: every knob is known)
    if facts.debug and knob_name in knobs.OPTIMISATION_KNOBS:
        return "debug build (-G or -Xptxas -g): ptxas takes no optimisation level"
    if facts.spills_are_errors and knob_name in knobs.REGISTER_CAPS:
        return "spills are errors here (--warn-on-spills with -Werror): no register cap"
    if knob.needs is Needs.RELOCATABLE and not facts.relocatable:
        return f"needs {knob.needs.value}"
    lto = _lto_reason(knob_name) if facts.lto else None
    if lto and flag_text(knob_name, value):  # (at its default it passes nothing, and says so)
        return lto
    if toolkit is not None and not toolkit.accepts(knob_name):
        why = toolkit.why_rejected(knob_name)
        return f"CUDA {toolkit.version} does not take it silently ({why})"
    return None


def _lto_reason(knob_name: str) -> str | None:
    """Why an nvcc option is not passed to a compile for link-time optimisation (knobs.LTO_*)."""
    flag = knobs.LTO_LINK_WIDE.get(knob_name)
    wide = ""
    if flag:
        wide = (f"the device link takes {flag} for the whole link: objects whose {flag} differs "
                "fail it")
        wide += ", and one object's is given to all" if flag == "-maxrregcount" else ""
    if knob_name in knobs.LTO_IGNORED:
        return ("with -dlto it reaches no linked code (CUDA 13.0's device link makes the same SASS "
                "without it)" + (f"; and {wide}" if wide else ""))
    return f"with -dlto {wide}" if wide else None


def _conflict_reason(name: str, settings: dict[str, Scalar], facts: CallFacts,
                     toolkit: Toolkit | None,
                     beside: dict[str, Scalar]) -> str | None:
    """Pairs ptxas will not take together: a knob it ignores beside another
    (knobs.IGNORED_BESIDE, a warning, an error with -Werror) is left out where
    the other reaches ptxas (the ACF's or the user's), the ACF's other where
    the user gives the knob; an -O and an -Ofc level it refuses together
    (`_level_conflict`). `beside`: knobs the same ptxas run gets from another plan."""
    both = {**beside, **settings}
    for ignored, others, at in knobs.IGNORED_BESIDE:
        if name == ignored:
            given = next(filter(None, (_given(o, at, both, facts, toolkit)
                                       for o in sorted(others))), None)
            if given:
                return (f"ptxas ignores it beside {given}, and warns of conflicting options "
                        "(an error with -Werror)")
        elif name in others and (at is None or _given(name, at, both, facts, toolkit)):
            user = facts.user_knobs.get(ignored)
            if user:
                return f"the user sets {user}, which ptxas would ignore beside it; the user wins"
    if name == "ptxas.opt_level" or name in knobs.FAST_COMPILE:
        return _level_conflict(name, both, facts, toolkit)
    return None


def _given(knob_name: str, at: Scalar | None, both: dict[str, Scalar], facts: CallFacts,
           toolkit: Toolkit | None) -> str | None:
    """Who gives ptxas `knob_name` (at the value `at`, unless None) in this
    call: the user's spelling, the ACF's knob = value, or None."""
    spelled = facts.user_knobs.get(knob_name)
    if spelled:
        found = re.search(r"(?:=|-O)([^=\s]+)$", spelled)
        return spelled if at is None or not found or found.group(1) == str(at) else None
    value = _reaching(knob_name, both, facts, toolkit)
    return f"{knob_name} = {value}" if value is not None and (at is None or value == at) else None


def _reaching(knob_name: str, both: dict[str, Scalar], facts: CallFacts,
              toolkit: Toolkit | None) -> Scalar | None:
    """The ACF's value of `knob_name` (normalised) where it reaches ptxas in this call and is not
    the knob's default; None otherwise."""
    value = both.get(knob_name)
    if value is None or _skip_reason(knob_name, value, facts, toolkit) is not None:
        return None
    return knobs.passed(knob_name, value)


def _level_conflict(name: str, both: dict[str, Scalar], facts: CallFacts,
                    toolkit: Toolkit | None) -> str | None:
    """An explicit -O and an -Ofc level that ptxas refuses together (fatal): the
    ACF's -Ofc is left out beside its own -O, the ACF's either beside the user's."""
    def ours(knob_name: str) -> str | None:
        value = _reaching(knob_name, both, facts, toolkit)
        return None if value is None else str(value)

    def users(knob_name: str, pattern: str) -> tuple[str, str] | None:
        spelled = facts.user_knobs.get(knob_name)
        found = re.search(pattern, spelled) if spelled else None
        # (?: said without its value)
        return (spelled, found.group(1) if found else "?") if spelled else None

    user_level = users("ptxas.opt_level", r"(?:-O|--opt-level[= ])([0-9])")
    user_fast = next(filter(None, (users(k, r"=(0|min|mid|max)\b")
                                   for k in sorted(knobs.FAST_COMPILE))), None)
    our_fast = next(filter(None, (ours(k) for k in sorted(knobs.FAST_COMPILE))), None)
    level = user_level[1] if user_level else ours("ptxas.opt_level")
    fast = user_fast[1] if user_fast else our_fast
    if not knobs.level_refused(level, fast):
        return None
    refused = f"ptxas refuses -O{level} with "
    refused += f"-Ofc={fast}" if fast != "?" else "most -Ofc levels"
    if name == "ptxas.opt_level" and user_fast:
        return f"the user sets {user_fast[0]}, and {refused}; the user wins"
    if name in knobs.FAST_COMPILE and user_level:
        return f"the user sets {user_level[0]}, and {refused}; the user wins"
    if name in knobs.FAST_COMPILE and not user_fast:
        return f"{refused} (fatal): the optimisation level kept"
    return None


def plan_flags(settings: dict[str, Scalar], facts: CallFacts, toolkit: Toolkit | None = None,
               acf_dir: str | None = None, beside: dict[str, Scalar] | None = None) -> FlagPlan:
    """`acf_dir`: the ACF's folder, where the files knobs name are (without
    it, those knobs are skipped)."""
    flags: list[str] = []
    applied: list[tuple[str, Scalar]] = []
    skipped: list[Skipped] = []
    for name, value in settings.items():
        reason = _skip_reason(name, value, facts, toolkit) or _conflict_reason(name, settings,
                                                                               facts, toolkit,
                                                                                 beside or {})
        knob = knobs.lookup(name)
        if reason is None and knob is not None and knob.kind is Kind.FILE and acf_dir is None \
                and value != knob.default:
            reason = "names a file, and the ACF's folder is not known here"
        if reason is not None:
            skipped.append(Skipped(name, reason))
            continue
        if knob is not None and knob.form is Form.TOOL and value != knob.default:
            applied.append((name, value))      # no flag: nvcc_evo.driver.cmdline.ptxas picks the
                                               # program
            continue
        text = flag_text(name, value, acf_dir)
        if not text:
            skipped.append(Skipped(name, DEFAULT_PASSES_NOTHING))
            continue
        flags.extend(text)
        applied.append((name, value))
    return FlagPlan(tuple(flags), tuple(applied), tuple(skipped))
