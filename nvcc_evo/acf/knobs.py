"""The knob table: every compiler control an ACF may name, as data.

One row per knob (docs/acf.md's knob table says what each one does; `nvcc-evo --evo-help` lists
them). A knob's dotted name says its family: `ptxas.*` travels as `-Xptxas <flag>`, `nvcc.*` is an
nvcc option, `define.NAME` is a source parameter (`-DNAME=value`) with no fixed domain.
"""
from __future__ import annotations

import re
from enum import Enum
from typing import NamedTuple, Union


def arch_order(arch: str) -> tuple[int, str]:
    """A sort key of SASS architectures by number (sm_75 before sm_100), a
    suffix after its base: wherever a list of them is shown (here, lean, for
    the build's `--explain` as for the retune and the report)."""
    digits = arch.removeprefix("sm_").rstrip("af")
    return (int(digits), arch) if digits.isdigit() else (1 << 30, arch)


Scalar = Union[int, float, bool, str]


class Kind(Enum):
    INT = "int"
    BOOL = "bool"
    ENUM = "enum"
    FILE = "file"          # a file beside the ACF, named relative to its folder; `none` for no file
    VERSION = "version"    # a ptxas release, "MAJOR.MINOR[.PATCH]"; `toolkit` for the toolkit's own


# The value of a FILE knob that names no file, and of a VERSION knob that
# keeps the toolkit's own tool: their defaults, written bare in an ACF.
NO_FILE = "none"
TOOLKIT_TOOL = "toolkit"
VERSION_VALUE = re.compile(r"[0-9]+\.[0-9]+(\.[0-9]+)?")


class Form(Enum):
    """How a value becomes flag text."""

    VALUE = "value"    # spelling.format(value): `-maxrregcount=40`, `--fmad=false`
    SWITCH = "switch"  # present when true, absent when false: `--use_fast_math`
    TOOL = "tool"      # no flag: it chooses the program that runs the step
                       # (nvcc_evo.driver.cmdline.ptxas)


class Needs(Enum):
    """Compile modes a knob needs; elsewhere the toolkit warns or rejects it."""

    ANY = "any"
    RELOCATABLE = "relocatable device code (-rdc=true or -dc)"


class Knob(NamedTuple):
    name: str
    kind: Kind
    spelling: str
    form: Form = Form.VALUE
    low: int = 0
    high: int = 0
    choices: tuple[str, ...] = ()
    default: Scalar | None = None   # the toolkit's behaviour with no flag
    since: tuple[int, int] = (13, 0)
    numeric: bool = False            # may change results: needs a tolerance check
    hazard: str = ""                 # may change semantics, not only numerics
    needs: Needs = Needs.ANY
    names: tuple[str, ...] = ()      # option names that set it (ptxas's or nvcc's long form)

    @property
    def family(self) -> str:
        return self.name.split(".", 1)[0]

    def describe_domain(self) -> str:
        if self.kind is Kind.INT:
            return f"an integer in {self.low}..{self.high}"
        if self.kind is Kind.BOOL:
            return "true or false"
        if self.kind is Kind.FILE:
            return f'a file in the ACF\'s folder ("controls/k.bin", relative to it) or {NO_FILE}'
        if self.kind is Kind.VERSION:
            return f'a ptxas release ("13.3", "13.3.73") or {TOOLKIT_TOOL}'
        return "one of " + ", ".join(self.choices)

    def flag_text(self) -> str:
        """The flag it adds, as `--evo-help` lists it (`-Xptxas -maxrregcount=N`)."""
        if self.form is Form.TOOL:
            return "(which ptxas runs the step)"
        shown = self.spelling.format({Kind.INT: "N", Kind.BOOL: "B",
                                      Kind.FILE: "FILE"}.get(self.kind, "V"))
        return f"-Xptxas {shown}" if self.family == "ptxas" else shown

    def values_text(self) -> str:
        """Its values, default and caveats, short (`0..3 (default 3); may change numerics`)."""
        values = {Kind.INT: f"{self.low}..{self.high}", Kind.BOOL: "true|false",
                  Kind.FILE: f"FILE|{NO_FILE}", Kind.VERSION: f'{TOOLKIT_TOOL}|"13.3"'}.get(
            self.kind, "|".join(self.choices))
        default = "" if self.default is None else f" (default {str(self.default).lower()})"
        notes = [note for note in (
            f"CUDA >= {self.since[0]}.{self.since[1]}" if self.since != (13, 0) else "",
            "with -rdc/-dc only" if self.needs is Needs.RELOCATABLE else "",
            "may change numerics" if self.numeric else "", self.hazard) if note]
        return values + default + "".join(f"; {note}" for note in notes)

    def accepts(self, value: Scalar) -> bool:
        if self.kind is Kind.BOOL:
            return isinstance(value, bool)
        if self.kind is Kind.INT:
            return (isinstance(value, int) and not isinstance(value, bool)
                    and self.low <= value <= self.high)
        if self.kind is Kind.FILE:
            return isinstance(value, str) and value != ""
        if self.kind is Kind.VERSION:
            return isinstance(value,
                              str) and (value == TOOLKIT_TOOL or
                                        VERSION_VALUE.fullmatch(value) is not None)
        return str(value) in self.choices and not isinstance(value, (bool, float))

    def normalise(self, value: Scalar) -> Scalar:
        """Enum values compare as text (`-Ofc=0` is the choice "0")."""
        return str(value) if self.kind is Kind.ENUM else value


_I, _B, _E = Kind.INT, Kind.BOOL, Kind.ENUM

KNOBS: tuple[Knob, ...] = (
    # ptxas, through -Xptxas
    Knob("ptxas.maxrregcount", _I, "-maxrregcount={}", low=24, high=255,
         names=('--maxrregcount', '-maxrregcount')),
    Knob("ptxas.register_usage_level", _I, "--register-usage-level={}", low=0, high=10, default=5,
         names=('--register-usage-level', '-regUsageLevel')),
    Knob("ptxas.opt_level", _I, "-O{}", low=0, high=3, default=3, numeric=True,
         names=('--opt-level', '-O')),
    Knob("ptxas.fast_compile", _E, "-Ofc={}", choices=("0", "min", "mid", "max"), default="0",
         numeric=True,
         names=('--Ofast-compile', '-Ofc')),
    Knob("ptxas.dlcm", _E, "-dlcm={}", choices=("ca", "cg", "cs", "lu", "cv"),
         names=('--def-load-cache', '-dlcm')),
    Knob("ptxas.dscm", _E, "-dscm={}", choices=("wb", "cg", "cs", "wt"),
         names=('--def-store-cache', '-dscm')),
    Knob("ptxas.flcm", _E, "-flcm={}", choices=("ca", "cg", "cs", "lu", "cv"),
         hazard="overrides explicit cache qualifiers; can break inter-block communication",
         names=('--force-load-cache', '-flcm')),
    Knob("ptxas.fscm", _E, "-fscm={}", choices=("wb", "cg", "cs", "wt"),
         hazard="overrides explicit cache qualifiers; can break inter-block communication",
         names=('--force-store-cache', '-fscm')),
    Knob("ptxas.fmad", _B, "--fmad={}", default=True, numeric=True,
         names=('--fmad', '-fmad')),
    Knob("ptxas.maxntid", _I, "--maxntid={}", low=32, high=1024,
         names=('--maxntid', '-maxntid')),
    Knob("ptxas.minnctapersm", _I, "--minnctapersm={}", low=1, high=32,
         names=('--minnctapersm', '-minnctapersm')),
    Knob("ptxas.override_directive_values", _B, "--override-directive-values", Form.SWITCH,
         default=False,
         names=('--override-directive-values', '-override-directive-values')),
    Knob("ptxas.disable_optimizer_constants", _B, "--disable-optimizer-constants", Form.SWITCH,
         default=False,
         names=('--disable-optimizer-constants', '-disable-optimizer-consts')),
    Knob("ptxas.device_function_maxrregcount", _I, "--device-function-maxrregcount={}", low=24,
         high=255,
         needs=Needs.RELOCATABLE,
         names=('--device-function-maxrregcount', '-func-maxrregcount')),
    Knob("ptxas.enable_func_clone_sc", _B, "--enable-func-clone-sc={}", default=False,
         since=(13, 5),
         needs=Needs.RELOCATABLE,
         names=('--enable-func-clone-sc', '-enable-func-clone-sc')),
    Knob("ptxas.optimize_float_atomics", _B, "--optimize-float-atomics", Form.SWITCH, default=False,
         numeric=True,
         names=('--optimize-float-atomics', '-opt-fp-atomics')),
    # Which ptxas runs the step, and the native controls file it applies
    # (CUDA 13.3+: an encrypted file made by NVIDIA's tools, locked to one
    # ptxas release). Both go to each ptxas step on its own (driver.cmdline.split).
    Knob("ptxas.version", Kind.VERSION, "", Form.TOOL, default=TOOLKIT_TOOL, numeric=True,
         hazard="another ptxas release: its cubins must load under the driver that runs them"),
    Knob("ptxas.controls", Kind.FILE, "--apply-controls={}", default=NO_FILE, since=(13, 3),
         numeric=True,
         names=('--apply-controls',)),
    # nvcc itself
    Knob("nvcc.maxrregcount", _I, "-maxrregcount={}", low=24, high=255,
         names=('--maxrregcount',)),
    Knob("nvcc.fast_compile", _E, "-Ofc={}", choices=("0", "min", "mid", "max"), default="0",
         numeric=True,
         names=('--Ofast-compile',)),
    Knob("nvcc.fmad", _B, "--fmad={}", default=True, numeric=True,
         names=('--fmad',)),
    Knob("nvcc.use_fast_math", _B, "--use_fast_math", Form.SWITCH, default=False, numeric=True,
         names=('--use_fast_math',)),
    Knob("nvcc.ftz", _B, "--ftz={}", default=False, numeric=True,
         names=('--ftz',)),
    Knob("nvcc.prec_div", _B, "--prec-div={}", default=True, numeric=True,
         names=('--prec-div',)),
    Knob("nvcc.prec_sqrt", _B, "--prec-sqrt={}", default=True, numeric=True,
         names=('--prec-sqrt',)),
    Knob("nvcc.jtd", _I, "-jtd={}", low=0, high=101, default=101,
         names=('--jump-table-density',)),
    Knob("nvcc.restrict", _B, "--restrict", Form.SWITCH, default=False,
         hazard="undefined behaviour if kernel pointers alias",
         names=('--restrict',)),
)

KNOB_BY_NAME: dict[str, Knob] = {k.name: k for k in KNOBS}
DEFINE_PREFIX = "define."


def lookup(name: str) -> Knob | None:
    """The table row for `name`; None for defines and unknown names."""
    return KNOB_BY_NAME.get(name)


def passed(name: str, value: Scalar | None) -> Scalar | None:
    """The value (normalised) a build passes a flag for; None where it passes
    none: no value, or the knob's default."""
    knob = lookup(name)
    if knob is None or value is None:
        return None
    value = knob.normalise(value)
    return None if knob.default is not None and value == knob.normalise(knob.default) else value


def is_define(name: str) -> bool:
    rest = name[len(DEFINE_PREFIX):]
    return name.startswith(DEFINE_PREFIX) and rest.isidentifier() and "." not in rest


# What a define's value may be: C tokens that no shell reads anything into.
# nvcc runs its steps through /bin/sh with each -D inside double quotes, where
# `$(...)`, backticks and backslashes still act; a value of identifiers
# (`float`, `std::size_t`) and number literals with their sign and suffixes
# (`16`, `-1.5e-3f`, `0x1Fu`), single spaces between them, has none of those.
_C_NAME = r"[A-Za-z_][A-Za-z0-9_]*(?:::[A-Za-z_][A-Za-z0-9_]*)*"
_C_NUMBER = (r"[+-]?(?:0[xX][0-9A-Fa-f]+[uUlLzZ]*|0[bB][01]+[uUlLzZ]*"
             r"|(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?[fFlLuUzZ]*)")
_C_TOKEN = f"(?:{_C_NAME}|{_C_NUMBER})"
DEFINE_VALUE = re.compile(f"(?:{_C_TOKEN}(?: {_C_TOKEN})*)?")
DEFINE_VALUE_FORMS = ("C identifiers and number literals (TILE, std::size_t, 16, -1.5e-3f, 0x1Fu; "
                      "one space between)")


def define_text(value: Scalar) -> str:
    """A define's value as it follows `-DNAME=` (true and false are 1 and 0)."""
    return {True: "1", False: "0"}[value] if isinstance(value, bool) else str(value)


def define_value_problem(value: Scalar) -> str | None:
    """Why `value` may not be a define's value (None when it may)."""
    text = define_text(value)
    if DEFINE_VALUE.fullmatch(text):
        return None
    return f"takes {DEFINE_VALUE_FORMS}, got {text!r} (nvcc's steps run through a shell)"


def known_names() -> list[str]:
    return sorted(KNOB_BY_NAME)


# Knobs that only each ptxas step can take: a program of its own, or a file
# that only some ptxas releases read (never on nvcc's command line).
STEP_ONLY = frozenset(k.name for k in KNOBS if k.kind in (Kind.FILE, Kind.VERSION))


# Knobs that set the same thing at two levels: a user setting either one
# owns both (nvcc's --fmad also reaches ptxas; nvcc's -maxrregcount is placed
# last on the ptxas line and always wins).
SAME_CONTROL: tuple[frozenset[str], ...] = (
    frozenset({"nvcc.fmad", "ptxas.fmad"}),
    frozenset({"nvcc.maxrregcount", "ptxas.maxrregcount"}),
    frozenset({"nvcc.fast_compile", "ptxas.fast_compile"}),
)

# nvcc options that imply knob values (`--use_fast_math` sets ftz, prec-div,
# prec-sqrt and fmad), so a user giving them owns those knobs.
IMPLIED_BY: dict[str, tuple[str, ...]] = {
    "--use_fast_math": ("nvcc.ftz", "nvcc.prec_div", "nvcc.prec_sqrt", "nvcc.fmad", "ptxas.fmad"),
}

# Knobs that must not reach a debug build: ptxas rejects any -O1..3 with -g.
OPTIMISATION_KNOBS = frozenset({"ptxas.opt_level", "ptxas.fast_compile", "nvcc.fast_compile",
                                "ptxas.register_usage_level"})
# Options that compute other values on purpose (approximate division, square root, flush-to-zero),
# unlike -O, another ptxas or a controls file, which change at most the rounding: under these a NaN
# or an unwritten output may be the knob's doing (execute.learned.WrongAnswers). At their defaults
# the arithmetic is IEEE's.
APPROXIMATING = frozenset({"nvcc.use_fast_math", "nvcc.ftz", "nvcc.prec_div", "nvcc.prec_sqrt"})
# Knobs that ptxas (13.0) ignores beside others, with a warning ("Conflicting options -maxrregcount
# and -maxntid specified, ignoring -maxntid option"), an error under -Werror: (the knob it ignores,
# beside which knobs, at which of their values (None: any)). A build leaves one of each such pair
# out. (--device-function-maxrregcount: none)
CAPS_OF_KERNELS = frozenset({"ptxas.maxrregcount", "nvcc.maxrregcount"})
IGNORED_BESIDE: tuple[tuple[str, frozenset[str], Scalar | None], ...] = (
    ("ptxas.maxntid", CAPS_OF_KERNELS, None),
    ("ptxas.minnctapersm", CAPS_OF_KERNELS, None),
    ("ptxas.register_usage_level", frozenset({"ptxas.opt_level"}), 0),
    ("ptxas.dlcm", frozenset({"ptxas.flcm"}), None),
    ("ptxas.dscm", frozenset({"ptxas.fscm"}), None),
)
# ptxas (13.0) takes an -Ofc level beside an explicit -O only in these pairs; any other is fatal
# ("Conflicting options -opt-level=<0,2,3> and --Ofast-compile=min"). Without -O every level goes.
FAST_COMPILE_WITH_LEVEL = frozenset({("0", "max"), ("1", "min"), ("1", "mid")})
FAST_COMPILE = frozenset({"ptxas.fast_compile", "nvcc.fast_compile"})  # (nvcc's -Ofc reaches ptxas
                                                                       # too)


def level_refused(level: Scalar | None, fast: Scalar | None) -> bool:
    """ptxas refuses this explicit -O level beside this -Ofc level (FAST_COMPILE_WITH_LEVEL);
    None: not passed. The one rule the build (driver.cmdline.flags) and the search's repair
    share."""
    return (level is not None and fast not in (None, "0")
            and (str(level), str(fast)) not in FAST_COMPILE_WITH_LEVEL)


# nvcc's options in a compile for link-time optimisation (-dlto, code=lto_XX), measured on CUDA 13.0
# (sm_90) in the SASS that the device link (-dlink -dlto) makes of every object at once: it ignores
# LTO_IGNORED (the same SASS, given to every object or to the link), and takes LTO_LINK_WIDE for the
# whole link, refusing objects whose values differ ("nvlink fatal: Cicc option values for '-ftz' do
# not match"; one object's -maxrregcount is given to all): on one unit's objects these fail the link
# or reach other units' code. Neither kind is passed there; defines and --restrict reach their own
# object's code.
LTO_IGNORED = frozenset({"nvcc.fmad", "nvcc.prec_div", "nvcc.fast_compile", "nvcc.jtd"})
LTO_LINK_WIDE = {"nvcc.fmad": "-fmad", "nvcc.prec_div": "-prec-div", "nvcc.prec_sqrt": "-prec-sqrt",
                 "nvcc.ftz": "-ftz", "nvcc.use_fast_math": "-ftz",
                 "nvcc.maxrregcount": "-maxrregcount"}
# Knobs that can make a kernel spill: off when spills are errors.
REGISTER_CAPS = frozenset({"ptxas.maxrregcount", "nvcc.maxrregcount",
                           "ptxas.device_function_maxrregcount"})
