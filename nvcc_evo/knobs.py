"""The knob table: every compiler control an ACF may name, as data.

One row per knob (see ../shared/knobs.md for the measurements behind each
row). A knob's dotted name says its family: `ptxas.*` travels as
`-Xptxas <flag>`, `nvcc.*` is an nvcc option, `define.NAME` is a source
parameter (`-DNAME=value`) with no fixed domain.
"""
from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Union

Scalar = Union[int, float, bool, str]


class Kind(Enum):
    INT = "int"
    BOOL = "bool"
    ENUM = "enum"


class Form(Enum):
    """How a value becomes flag text."""

    VALUE = "value"    # spelling.format(value): `-maxrregcount=40`, `--fmad=false`
    SWITCH = "switch"  # present when true, absent when false: `--use_fast_math`


class Needs(Enum):
    """Compile modes a knob needs; elsewhere the toolkit warns or rejects it."""

    ANY = "any"
    RELOCATABLE = "relocatable device code (-rdc=true or -dc)"
    COMPILE_ONLY = "compile only (-c)"


@dataclass(frozen=True)
class Knob:
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

    @property
    def family(self) -> str:
        return self.name.split(".", 1)[0]

    def describe_domain(self) -> str:
        if self.kind is Kind.INT:
            return f"an integer in {self.low}..{self.high}"
        if self.kind is Kind.BOOL:
            return "true or false"
        return "one of " + ", ".join(self.choices)

    def accepts(self, value: Scalar) -> bool:
        if self.kind is Kind.BOOL:
            return isinstance(value, bool)
        if self.kind is Kind.INT:
            return (isinstance(value, int) and not isinstance(value, bool)
                    and self.low <= value <= self.high)
        return str(value) in self.choices and not isinstance(value, (bool, float))

    def normalise(self, value: Scalar) -> Scalar:
        """Enum values compare as text (`-Ofc=0` is the choice "0")."""
        return str(value) if self.kind is Kind.ENUM else value


_I, _B, _E = Kind.INT, Kind.BOOL, Kind.ENUM

KNOBS: tuple[Knob, ...] = (
    # ptxas, through -Xptxas
    Knob("ptxas.maxrregcount", _I, "-maxrregcount={}", low=24, high=255),
    Knob("ptxas.register_usage_level", _I, "--register-usage-level={}", low=0, high=10, default=5),
    Knob("ptxas.opt_level", _I, "-O{}", low=0, high=3, default=3, numeric=True),
    Knob("ptxas.fast_compile", _E, "-Ofc={}", choices=("0", "min", "mid", "max"), default="0", numeric=True),
    Knob("ptxas.dlcm", _E, "-dlcm={}", choices=("ca", "cg", "cs", "lu", "cv")),
    Knob("ptxas.dscm", _E, "-dscm={}", choices=("wb", "cg", "cs", "wt")),
    Knob("ptxas.flcm", _E, "-flcm={}", choices=("ca", "cg", "cs", "lu", "cv"),
         hazard="overrides explicit cache qualifiers; can break inter-block communication"),
    Knob("ptxas.fscm", _E, "-fscm={}", choices=("wb", "cg", "cs", "wt"),
         hazard="overrides explicit cache qualifiers; can break inter-block communication"),
    Knob("ptxas.fmad", _B, "--fmad={}", default=True, numeric=True),
    Knob("ptxas.maxntid", _I, "--maxntid={}", low=32, high=1024),
    Knob("ptxas.minnctapersm", _I, "--minnctapersm={}", low=1, high=32),
    Knob("ptxas.override_directive_values", _B, "--override-directive-values", Form.SWITCH, default=False),
    Knob("ptxas.disable_optimizer_constants", _B, "--disable-optimizer-constants", Form.SWITCH, default=False),
    Knob("ptxas.device_function_maxrregcount", _I, "--device-function-maxrregcount={}", low=24, high=255,
         needs=Needs.RELOCATABLE),
    Knob("ptxas.enable_func_clone_sc", _B, "--enable-func-clone-sc={}", default=False, since=(13, 5),
         needs=Needs.COMPILE_ONLY),
    Knob("ptxas.optimize_float_atomics", _B, "--optimize-float-atomics", Form.SWITCH, default=False,
         numeric=True),
    # nvcc itself
    Knob("nvcc.maxrregcount", _I, "-maxrregcount={}", low=24, high=255),
    Knob("nvcc.fast_compile", _E, "-Ofc={}", choices=("0", "min", "mid", "max"), default="0", numeric=True),
    Knob("nvcc.fmad", _B, "--fmad={}", default=True, numeric=True),
    Knob("nvcc.use_fast_math", _B, "--use_fast_math", Form.SWITCH, default=False, numeric=True),
    Knob("nvcc.ftz", _B, "--ftz={}", default=False, numeric=True),
    Knob("nvcc.prec_div", _B, "--prec-div={}", default=True, numeric=True),
    Knob("nvcc.prec_sqrt", _B, "--prec-sqrt={}", default=True, numeric=True),
    Knob("nvcc.jtd", _I, "-jtd={}", low=0, high=101, default=101),
    Knob("nvcc.restrict", _B, "--restrict", Form.SWITCH, default=False,
         hazard="undefined behaviour if kernel pointers alias"),
)

KNOB_BY_NAME: dict[str, Knob] = {k.name: k for k in KNOBS}
DEFINE_PREFIX = "define."


def lookup(name: str) -> Knob | None:
    """The table row for `name`; None for defines and unknown names."""
    return KNOB_BY_NAME.get(name)


def is_define(name: str) -> bool:
    rest = name[len(DEFINE_PREFIX):]
    return name.startswith(DEFINE_PREFIX) and rest.isidentifier() and "." not in rest


def known_names() -> list[str]:
    return sorted(KNOB_BY_NAME)
