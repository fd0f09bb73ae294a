"""Typed values of an ACF file, as the parser builds them.

Every statement keeps its Span so that diagnostics point into the source and
the formatter can put comments back where they were.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Union

from nvcc_evo.acf.expressions import NO_SPAN, Expr, Span
from nvcc_evo.acf.knobs import NO_FILE, Kind, Scalar, lookup

ACF_VERSION = 1


# ------------------------------------------------------------ statements
@dataclass(frozen=True)
class Setting:
    """`knob = value`: a pin, or a tuned value in a target block."""

    knob: str
    value: Scalar
    span: Span = field(default=NO_SPAN, compare=False)


@dataclass(frozen=True)
class SetDomain:
    values: tuple[Scalar, ...]


@dataclass(frozen=True)
class RangeDomain:
    low: int
    high: int
    step: int = 1

    def values(self) -> tuple[int, ...]:
        return tuple(range(self.low, self.high + 1, self.step))


@dataclass(frozen=True)
class BoolDomain:
    pass


Domain = Union[SetDomain, RangeDomain, BoolDomain]


def domain_values(domain: Domain) -> tuple:
    if isinstance(domain, BoolDomain):
        return (False, True)
    if isinstance(domain, RangeDomain):
        return domain.values()
    return tuple(domain.values)


@dataclass(frozen=True)
class Space:
    knob: str
    domain: Domain
    span: Span = field(default=NO_SPAN, compare=False)
    unordered: bool = False     # `KNOB in DOMAIN unordered`: its values name choices (docs/acf.md)


@dataclass(frozen=True)
class SpaceRequire:
    """`require EXPR CMP EXPR` in a search block: a condition over the
    unit's defines (bare names: `BM` is `define.BM`); a genome for which it
    does not hold is never proposed."""

    left: Expr
    op: str
    right: Expr
    span: Span = field(default=NO_SPAN, compare=False)


@dataclass(frozen=True)
class Condition:
    """`metric CMP bound`; a relative bound multiplies the baseline's value."""

    metric: str
    op: str
    bound: int | float
    relative: bool = False
    span: Span = field(default=NO_SPAN, compare=False)


@dataclass(frozen=True)
class Tune:
    minimize: tuple[str, ...] = ()
    require: tuple[Condition, ...] = ()
    select: str | None = None
    select_where: tuple[Condition, ...] = ()
    span: Span = field(default=NO_SPAN, compare=False)
    item_spans: tuple[tuple[str, Span], ...] = field(default=(), compare=False)  # (kind, span)


@dataclass(frozen=True)
class Let:
    name: str
    expr: Expr
    span: Span = field(default=NO_SPAN, compare=False)


@dataclass(frozen=True)
class InitParam:
    name: str | None
    expr: Expr


@dataclass(frozen=True)
class Arg:
    """A kernel argument: an array (count and init) or a scalar (value)."""

    name: str
    dtype: str
    count: Expr | None = None          # arrays only
    init: str = ""                     # arrays: output, random, range, constant
    params: tuple[InitParam, ...] = ()
    value: Expr | None = None          # scalars only
    span: Span = field(default=NO_SPAN, compare=False)

    @property
    def is_array(self) -> bool:
        return self.count is not None


@dataclass(frozen=True)
class Check:
    name: str
    rtol: float | None = None
    atol: float | None = None
    exact: bool = False
    span: Span = field(default=NO_SPAN, compare=False)


@dataclass(frozen=True)
class Launch:
    """`grid (...)`, `block (...)` or `shared expr`."""

    what: str
    dims: tuple[Expr, ...]
    span: Span = field(default=NO_SPAN, compare=False)


@dataclass(frozen=True)
class Text:
    """`kernel`, `command` or `metric` with its text."""

    what: str
    text: str
    span: Span = field(default=NO_SPAN, compare=False)


TAKES = ("first", "last", "min", "max", "median", "mean")    # which of a metric's matches counts


@dataclass(frozen=True)
class Metric:
    """`metric [NAME] "REGEX" [take HOW] [group G] [unit "U"] [maximize]`:
    a number a bench command prints. Unnamed, it is the objective `metric`.
    `metric NAME kernels` (`kernels`): no number printed, but the GPU time
    in ms of the unit's own kernels while the command runs, recorded by
    nvcc-evo's injection library (nvcc_evo.measure.profile)."""

    name: str
    regex: str
    take: str = "first"
    group: str | int | None = None     # None: the first group, else the whole match
    unit: str = ""
    maximize: bool = False
    named: bool = False                # spelled with its name
    span: Span = field(default=NO_SPAN, compare=False)
    kernels: bool = False              # the unit's kernels' GPU time, not the output's

    @staticmethod
    def of_kernels(name: str, span: Span = NO_SPAN) -> "Metric":
        return Metric(name, "", unit="ms", named=True, span=span, kernels=True)


@dataclass(frozen=True)
class RunCheck:
    """What makes a bench command's run a wrong answer: `check exit N` (any
    other exit code), `check "REGEX"` (must match its output), `check not
    "REGEX"` (must not), `check command "CMD"` (must exit 0)."""

    kind: str                          # exit, match, absent, command
    value: str | int
    span: Span = field(default=NO_SPAN, compare=False)


@dataclass(frozen=True)
class Confirm:
    """`confirm ["CMD"] [rounds N]`: the final interleaved re-run's command
    (default: the bench command) and its number of rounds."""

    command: str | None = None
    rounds: int | None = None
    span: Span = field(default=NO_SPAN, compare=False)


@dataclass(frozen=True)
class Repeat:
    """`repeat N` runs per candidate, or `repeat LOW..HIGH`: adaptive."""

    low: int
    high: int
    span: Span = field(default=NO_SPAN, compare=False)


@dataclass(frozen=True)
class Timeout:
    seconds: float
    span: Span = field(default=NO_SPAN, compare=False)


@dataclass(frozen=True)
class Bench:
    kernel: Text | None = None
    lets: tuple[Let, ...] = ()
    args: tuple[Arg, ...] = ()
    launch: tuple[Launch, ...] = ()
    checks: tuple[Check, ...] = ()
    command: Text | None = None
    metrics: tuple[Metric, ...] = ()
    span: Span = field(default=NO_SPAN, compare=False)
    reference: Text | None = None      # "file.py:function": numpy outputs to check against
    run_checks: tuple[RunCheck, ...] = ()
    confirm: Confirm | None = None
    repeat: Repeat | None = None
    timeout: Timeout | None = None

    @property
    def metric(self) -> Metric | None:
        """The first metric: the one a search minimises when the tune block names none."""
        return self.metrics[0] if self.metrics else None

    def launch_dims(self, what: str) -> tuple[Expr, ...] | None:
        for item in self.launch:
            if item.what == what:
                return item.dims
        return None


@dataclass(frozen=True)
class Record:
    """One provenance line: `key = value [+- spread]`."""

    key: str
    value: Scalar
    spread: float | None = None
    span: Span = field(default=NO_SPAN, compare=False)


def settings_digest(settings: tuple[Setting, ...]) -> str:
    """A digest of a target's knobs (values, not spelling; order ignored): what a retune wrote and
    measured."""
    values = sorted([s.knob, s.value] for s in settings)
    return "sha256:" + hashlib.sha256(json.dumps(values).encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Target:
    """`target sm_90 ["GPU"] { ... }`; one block may serve several
    architectures (`target sm_80, sm_86, sm_90 { ... }`): `arch` is the first,
    `more_archs` the others, in the order written."""

    arch: str
    gpu: str | None = None
    settings: tuple[Setting, ...] = ()
    provenance: tuple[Record, ...] | None = None
    span: Span = field(default=NO_SPAN, compare=False)
    provenance_span: Span = field(default=NO_SPAN, compare=False)
    more_archs: tuple[str, ...] = ()

    @property
    def archs(self) -> tuple[str, ...]:
        return (self.arch, *self.more_archs)

    def serves(self, arch: str) -> bool:
        return arch in self.archs

    def record(self, key: str) -> Record | None:
        for rec in self.provenance or ():
            if rec.key == key:
                return rec
        return None

    def edited(self) -> bool:
        """Its knobs are not those its provenance measured (`settings_digest`, written by a retune):
        a value edited by hand since, which the provenance's tuned values do not describe."""
        recorded = self.record("settings_digest")
        return recorded is not None and recorded.value != settings_digest(self.settings)

    @property
    def backend(self) -> str | None:
        """The backend that chose this entry (its provenance's `backend`); None: never tuned."""
        found = self.record("backend")
        return str(found.value) if found is not None else None

    def __str__(self) -> str:
        archs = ", ".join(self.archs)
        return f"{archs} {self.gpu!r}" if self.gpu else archs


SOURCE, KERNEL = "source", "kernel"     # what a unit's globs name: source paths, or PTX entry names


@dataclass(frozen=True)
class Unit:
    globs: tuple[str, ...]
    pins: tuple[Setting, ...] = ()
    space: tuple[Space, ...] = ()
    tune: Tune | None = None
    bench: Bench | None = None
    targets: tuple[Target, ...] = ()
    span: Span = field(default=NO_SPAN, compare=False)
    search_span: Span = field(default=NO_SPAN, compare=False)
    requires: tuple[SpaceRequire, ...] = ()          # the search block's constraints over defines
    kind: str = SOURCE  # KERNEL: the globs name PTX entries (`NAME_GLOB[@SHA256_PREFIX]`)

    def __str__(self) -> str:
        names = " ".join(f'"{g}"' for g in self.globs)
        return f"kernel {names}" if self.kind == KERNEL else names

    @property
    def is_kernel(self) -> bool:
        return self.kind == KERNEL

    def find_target(self, arch: str, gpu: str | None = None) -> Target | None:
        """The block that serves `arch` for this GPU name (None: the plain one)."""
        for target in self.targets:
            if target.serves(arch) and target.gpu == gpu:
                return target
        return None

    @property
    def archs(self) -> tuple[str, ...]:
        """Every architecture its target blocks serve, each once, in order."""
        return tuple(dict.fromkeys(a for t in self.targets for a in t.archs))

    def named_files(self) -> tuple[str, ...]:
        """The files its knobs name (controls files), in pins, search and
        targets, relative to the ACF's folder: part of what a build of it
        depends on, so part of its fingerprint."""
        is_file = lambda name: getattr(lookup(name), "kind", None) is Kind.FILE
        values = [s.value for s in self.pins if is_file(s.knob)]
        values += [v for s in self.space if is_file(s.knob) for v in domain_values(s.domain)]
        values += [s.value for t in self.targets for s in t.settings if is_file(s.knob)]
        return tuple(sorted({str(v) for v in values} - {NO_FILE}))

    @property
    def space_digest(self) -> str:
        """A digest of the pins and the search block (values, not spelling:
        `1..3` is `{1, 2, 3}`; order of statements ignored): what a tuned entry
        depends on besides the source and toolkit, kept in its provenance."""
        pins = sorted(([p.knob, p.value] for p in self.pins), key=lambda pin: pin[0])
        space = sorted(((s.knob, list(domain_values(s.domain))) for s in self.space),
                       key=lambda entry: entry[0])
        parts = [pins, space]
        if self.requires:  # (only then: the digests of units without constraints stay as they were)
            parts.append(sorted(repr((r.left, r.op, r.right)) for r in self.requires))
        return "sha256:" + hashlib.sha256(json.dumps(parts).encode()).hexdigest()[:16]

    @property
    def tune_digest(self) -> str:
        """A digest of the tune block (values, not spelling: objectives in their order, conditions
        in any): what a retune minimises, requires and selects by, so an edit of it makes a tuned
        entry stale."""
        tune = self.tune or Tune()
        conditions = lambda found: sorted([c.metric, c.op, float(c.bound), c.relative]
                                          for c in found)
        parts = [list(tune.minimize), conditions(tune.require), tune.select,
                 conditions(tune.select_where)]
        return "sha256:" + hashlib.sha256(json.dumps(parts).encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Comment:
    line: int
    column: int
    text: str
    own_line: bool      # nothing but blanks before it on its line
    start: int


@dataclass(frozen=True)
class AcfFile:
    path: str
    version: int
    units: tuple[Unit, ...]
    comments: tuple[Comment, ...] = ()
    header_span: Span = field(default=NO_SPAN, compare=False)

    def __str__(self) -> str:
        return f"{self.path}: ACF {self.version}, {len(self.units)} unit(s)"
