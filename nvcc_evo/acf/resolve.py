"""Resolve stage: semantic checks of a parsed ACF.

Every problem of a file is collected (not only the first) and reported as
`path:LINE:COL: error: ...` saying what was expected and what was found.
"""
from __future__ import annotations

import difflib
import os
import re
from pathlib import Path
from typing import Iterable, Iterator, NamedTuple

from nvcc_evo.acf import kernelname, knobs, model, unitpath
from nvcc_evo.acf.expressions import Binary, Span
from nvcc_evo.acf.knobs import arch_order

from nvcc_evo.acf.bench import spec as benchspec
from nvcc_evo.acf.bench.check import BenchChecks, listed, shown
from nvcc_evo.acf.edit.spelling import show_string
from nvcc_evo.acf.objectives import ObjectiveChecks
from nvcc_evo.acf.parse import parse_text
from nvcc_evo.acf.sources import source_defines, unguarded_define, unit_sources
from nvcc_evo.acf.text import read_text
from nvcc_evo.errors import AcfError, Diagnostic, Location

ARCH_PATTERN = re.compile(r"sm_[0-9]{2,3}[af]?")


REQUIRE_SEARCH_LIMIT = 100_000     # combinations of defines tried to find one that meets a search
                                   # block's requires
# Values one search dimension may list: a build digests every one of them
# (the unit's space_digest), so a range of 10**8 values would cost each build
# a minute and gigabytes, and one past 2**63 cannot be listed at all.
RANGE_VALUES_LIMIT = 100_000
# ptxas knobs a PTX directive (.reqntid, .maxntid, .maxnreg, .minnctapersm) beats unless overridden
DIRECTIVE_KNOBS = ("ptxas.maxrregcount", "ptxas.maxntid", "ptxas.minnctapersm")


class Checker(BenchChecks, ObjectiveChecks):
    def __init__(self, file: model.AcfFile, text: str, with_sources: bool = False):
        self.file, self.lines, self.with_sources = file, text.splitlines(), with_sources
        self.diagnostics: list[Diagnostic] = []
        self.looked_at: list[str] = []

    def error(self, span: Span, message: str) -> None:
        source = self.lines[span.line - 1] if 0 < span.line <= len(self.lines) else ""
        self.diagnostics.append(Diagnostic(Location(self.file.path, span.line, span.column),
                                           message, source))

    # ---------------------------------------------------------------- file
    def run(self) -> list[Diagnostic]:
        if self.file.version != model.ACF_VERSION:
            self.error(self.file.header_span, f"unsupported ACF version {self.file.version} "
                       f"(this nvcc-evo reads version {model.ACF_VERSION})")
        first_seen: dict[frozenset, model.Unit] = {}
        for unit in self.file.units:
            key = frozenset(unit.globs)
            if key in first_seen:
                self.error(unit.span, f"duplicate unit {unit} (first at line "
                                      f"{first_seen[key].span.line})")
            first_seen.setdefault(key, unit)
            self.check_unit(unit)
        return sorted(self.diagnostics, key=lambda d: (d.location.line, d.location.column))

    def check_unit(self, unit: model.Unit) -> None:
        for glob in unit.globs:
            problem = (kernelname if unit.is_kernel else unitpath).glob_problem(glob)
            if problem is not None:
                self.error(self.glob_span(unit, glob), problem)
        if unit.is_kernel:
            self.check_kernel_unit(unit)
        pins = self.check_settings(unit.pins, "pin")
        spaces = self.check_space(unit.space)
        if self.with_sources:
            self.check_fixed_defines(unit, spaces)
        for knob_name, pin in pins.items():
            space = spaces.get(knob_name)
            if space is not None and not _in_domain(pin.value, space.domain,
                                                    knobs.lookup(knob_name)):
                self.error(pin.span, f"pinned value {shown(pin.value)} of {knob_name} is outside "
                           f"its search space (line {space.span.line})")
        if unit.requires:
            self.check_requires(unit, spaces, pins)
        metrics = tuple(m.name for m in unit.bench.metrics) if unit.bench is not None else ()
        if unit.tune is not None:
            self.check_tune(unit.tune, metrics)
        defines = {s.knob[len(knobs.DEFINE_PREFIX):] for s in _all_settings(unit)
                   if knobs.is_define(s.knob)}
        if unit.bench is not None:
            before = len(self.diagnostics)
            self.check_bench(unit.bench, defines, self.source_names(unit))
            clean = len(self.diagnostics) == before
            if self.with_sources and unit.bench.kernel is not None and clean:
                self.check_bench_at_defaults(unit, defines)
        self.check_targets(unit, pins, metrics)

    def source_names(self, unit: model.Unit) -> set[str] | None:
        """The names the unit's sources beside the ACF #define (a bench may
        use them; none when no source is there), None where sources are not
        read: the wrapper's check."""
        if not self.with_sources:
            return None
        return set().union(*(source_defines(s)
                             for s in unit_sources(unit, Path(self.file.path).parent)))

    def check_kernel_unit(self, unit: model.Unit) -> None:
        """A kernel unit's code is compiled by ptxas alone (nvcc-evo-ptxas, for
        Triton): only ptxas.* knobs reach it, and only a bench command measures it."""
        for setting in _all_settings(unit):
            knob = knobs.lookup(setting.knob)
            if (knob is None and knobs.is_define(setting.knob)) or (knob is not None and
                                                                    knob.family != "ptxas"):
                self.error(setting.span, "a kernel unit takes ptxas.* knobs only (its PTX is "
                           f"compiled by ptxas alone), got {setting.knob}")
        self.check_directive_override(unit)
        bench = unit.bench
        if bench is not None and (bench.kernel is not None or bench.args or bench.launch):
            self.error(bench.span, "a kernel unit is measured by a bench command (`command "
                       "\"...\"` with a metric): its kernel is launched by the program that "
                       "compiles it")

    def check_directive_override(self, unit: model.Unit) -> None:
        """Triton's PTX states its block size (`.reqntid`): ptxas then ignores a
        register cap, a thread hint or a CTA count from its command line unless
        told to let them win, so such a knob must come with the override."""
        settings = list(_all_settings(unit))
        override = "ptxas.override_directive_values"
        if any(s.knob == override and s.value is not False for s in settings):
            return
        capped = next((s for s in settings if s.knob in DIRECTIVE_KNOBS), None)
        if capped is not None:
            self.error(capped.span, f"{capped.knob} reaches a kernel whose PTX states its block "
                       f"size (Triton's `.reqntid`) only with `pin {override} = true`; without it "
                       "ptxas ignores it")

    def glob_span(self, unit: model.Unit, glob: str) -> Span:
        """Where the glob's string is (the unit's own span if not found)."""
        quoted = show_string(glob)                      # as the formatter writes it
        for line in range(unit.span.line, min(unit.span.end_line, len(self.lines)) + 1):
            start = unit.span.column - 1 if line == unit.span.line else 0
            column = self.lines[line - 1].find(quoted, start)
            if column >= 0:
                return Span(line, column + 1, line, column + 1 + len(quoted), 0, 0)
        return unit.span

    # ---------------------------------------------------------------- knobs
    def check_knob_name(self, name: str, span: Span) -> knobs.Knob | None:
        knob = knobs.lookup(name)
        if knob is None and not knobs.is_define(name):
            family = name.split(".", 1)[0]
            same_family = [k for k in knobs.known_names() if k.startswith(family + ".")]
            close = difflib.get_close_matches(name, knobs.known_names(), n=1)
            hint = f"; did you mean {close[0]}?" if close else ""
            known = ", ".join(same_family) if same_family else \
                "families ptxas.*, nvcc.* and define.NAME"
            self.error(span, f"unknown knob '{name}'{hint} (known: {known})")
        return knob

    def check_value(self, name: str, value: model.Scalar, span: Span) -> None:
        """A knob's value in its domain; a define's, a C macro value that no
        shell reads anything into (nvcc runs its steps through /bin/sh)."""
        knob = knobs.lookup(name)
        if knob is not None and not knob.accepts(value):
            self.error(span, f"{knob.name} takes {knob.describe_domain()}, got {shown(value)}")
        elif knob is not None and knob.kind is knobs.Kind.FILE and value != knob.default:
            self.check_named_file(str(value), span, f"{name} file")
        elif knob is None and knobs.is_define(name):
            problem = knobs.define_value_problem(value)
            if problem is not None:
                self.error(span, f"{name} {problem}")

    def check_settings(self, settings: Iterable[model.Setting],
                       what: str) -> dict[str, model.Setting]:
        seen: dict[str, model.Setting] = {}
        for setting in settings:
            if setting.knob in seen:
                self.error(setting.span, f"{setting.knob} is set twice in this {what} "
                           f"(first at line {seen[setting.knob].span.line})")
            self.check_knob_name(setting.knob, setting.span)
            self.check_value(setting.knob, setting.value, setting.span)
            seen.setdefault(setting.knob, setting)
        return seen

    def check_fixed_defines(self, unit: model.Unit, spaces: dict) -> None:
        """A searched define that the unit's source fixes itself (a #define
        with no #ifndef guard): every value would give the same code."""
        folder = Path(self.file.path).parent
        files = unit_sources(unit, folder)
        for name, space in spaces.items():
            macro = name[len(knobs.DEFINE_PREFIX):]
            found = next(filter(None, (unguarded_define(f, macro) for f in files)), None) \
                if knobs.is_define(name) else None
            if found:
                path, line, column = found
                inside = str(path).startswith(str(folder))
                shown = os.path.relpath(path, folder) if inside else str(path)
                self.error(space.span, f"{name} is searched, but {shown}:{line}:{column} defines "
                           f"{macro} without an #ifndef guard, so every value gives the same code "
                           f"(wrap it in #ifndef {macro} ... #endif)")

    def check_space(self, entries: Iterable[model.Space]) -> dict[str, model.Space]:
        seen: dict[str, model.Space] = {}
        for space in entries:
            if space.knob in seen:
                self.error(space.span, f"{space.knob} appears twice in search "
                           f"(first at line {seen[space.knob].span.line})")
            seen.setdefault(space.knob, space)
            knob = self.check_knob_name(space.knob, space.span)
            self.check_domain(knob, space)
        return seen

    def check_requires(self, unit: model.Unit, spaces: dict[str, model.Space],
                       pins: dict[str, model.Setting]) -> None:
        """Names in a search block's requires are defines it searches or the
        unit pins, with numeric values; some point of the space meets them all."""
        if not all(_listable(space.domain) for space in spaces.values()):
            return                       # check_domain said why; its values are not listed
        values = {k[len(knobs.DEFINE_PREFIX):]: model.domain_values(v.domain)
                  for k, v in spaces.items()
                  if knobs.is_define(k)}
        values.update({k[len(knobs.DEFINE_PREFIX):]: (p.value,)
                       for k, p in pins.items() if knobs.is_define(k)})
        before = len(self.diagnostics)
        for require in unit.requires:
            for ref in (r for side in (require.left, require.right)
                        for r in benchspec.names_in(side)):
                if ref.name not in values:
                    self.error(ref.span, f"undefined name '{ref.name}' in require (defines "
                               f"searched or pinned: {listed(values) or 'none'})")
                elif not all(isinstance(v, (int, float)) and not isinstance(v, bool)
                             for v in values[ref.name]):
                    self.error(ref.span, f"define.{ref.name} takes values that are not numbers "
                               f"({', '.join(shown(v) for v in values[ref.name])}): a require "
                               "compares numbers")
            self.check_calls(Binary(require.op, require.left, require.right))
        tried = benchspec.requires_unmet(unit.requires, values, REQUIRE_SEARCH_LIMIT) \
            if len(self.diagnostics) == before else 0
        if tried:                        # no combination of the named defines meets every require
            self.error(unit.requires[0].span, "no combination of "
                       f"{', '.join(benchspec.require_names(unit.requires))} in the search block "
                       f"meets every require ({tried} tried)")

    def check_domain(self, knob: knobs.Knob | None, space: model.Space) -> None:
        domain = space.domain
        values: tuple[model.Scalar, ...]
        if isinstance(domain, model.RangeDomain):
            if domain.step <= 0 or domain.low > domain.high:
                self.error(space.span,
                           f"empty range {domain.low}..{domain.high} step {domain.step}: "
                           "expected LOW <= HIGH and a positive step")
                return
            count = (domain.high - domain.low) // domain.step + 1
            if count > RANGE_VALUES_LIMIT:
                self.error(space.span, f"the range {domain.low}..{domain.high} step {domain.step} "
                           f"holds {count} values; a search dimension holds at most "
                           f"{RANGE_VALUES_LIMIT} (use a larger step or a set)")
                return
            if knob is not None and knob.kind is not knobs.Kind.INT:
                self.error(space.span, f"{knob.name} takes {knob.describe_domain()}, got an "
                                       "integer range")
                return
            values = (domain.low, domain.high)
        elif isinstance(domain, model.BoolDomain):
            values = (True, False)
        else:
            values = domain.values
            if len(set(values)) != len(values):
                self.error(space.span, f"the set for {space.knob} repeats a value")
        for value in values:
            self.check_value(space.knob, value, space.span)

    # ---------------------------------------------------------------- targets
    def check_targets(self, unit: model.Unit, pins: dict[str, model.Setting],
                      metrics: tuple[str, ...]) -> None:
        """Each (architecture, GPU name) is served by one block at most: a
        block that names several architectures counts for each."""
        seen: dict[tuple, model.Target] = {}
        for target in unit.targets:
            for arch in dict.fromkeys(target.archs):
                key = (arch, target.gpu)
                if key in seen:
                    shown = f"{arch} {target.gpu!r}" if target.gpu else arch
                    self.error(target.span, f"duplicate target {shown} in unit {unit} "
                               f"(first at line {seen[key].span.line})")
                seen.setdefault(key, target)
            if len(set(target.archs)) < len(target.archs):
                twice = next(a for a in target.archs if target.archs.count(a) > 1)
                self.error(target.span, f"target names {twice} twice")
            self.check_target(target, pins, metrics)

    def check_target(self, target: model.Target, pins: dict[str, model.Setting],
                     metrics: tuple[str, ...] = ()) -> None:
        for arch in target.archs:
            if not ARCH_PATTERN.fullmatch(arch):
                self.error(target.span, "target names a SASS architecture such as sm_90 or "
                           f"sm_90a, got '{arch}'")
        settings = self.check_settings(target.settings, "target")
        for name, setting in settings.items():
            pin = pins.get(name)
            if pin is not None and pin.value != setting.value:
                self.error(setting.span, f"{name} is pinned to {shown(pin.value)} (line "
                           f"{pin.span.line}), but this target sets {shown(setting.value)}")
        for record in target.provenance or ():
            self.check_record(record, metrics)


class _Named(NamedTuple):
    """A knob a unit names: pinned, set in a target, or searched (value None)."""
    knob: str
    value: model.Scalar | None
    span: model.Span


def _all_settings(unit: model.Unit) -> Iterator[_Named]:
    for setting in unit.pins:
        yield _Named(setting.knob, setting.value, setting.span)
    for space in unit.space:
        yield _Named(space.knob, None, space.span)
    for target in unit.targets:
        for setting in target.settings:
            yield _Named(setting.knob, setting.value, setting.span)


def _in_domain(value: model.Scalar, domain: model.Domain, knob: knobs.Knob | None) -> bool:
    if isinstance(domain, model.BoolDomain):
        return isinstance(value, bool)
    if isinstance(domain, model.RangeDomain):
        return isinstance(value, int) and not isinstance(value, bool) and value in domain.values()
    norm = knob.normalise if knob is not None else (lambda v: v)
    return norm(value) in {norm(v) for v in domain.values}


def _listable(domain: model.Domain) -> bool:
    """A domain check_domain accepts the size of (the others are its errors)."""
    if not isinstance(domain, model.RangeDomain):
        return True
    return domain.step > 0 and domain.low <= domain.high and \
        (domain.high - domain.low) // domain.step + 1 <= RANGE_VALUES_LIMIT


def check(file: model.AcfFile, text: str, with_sources: bool = False) -> tuple[str, ...]:
    """Raise AcfError with every semantic problem of `file`. `with_sources`:
    also what depends on the units' source files beside it (each bench must
    launch at its source's defaults). The wrapper leaves that out, so that
    editing a kernel's #define never turns tuning off for a whole build.
    Without sources, the verdict depends on the text and on the files its
    knobs and references name (there, inside the ACF's folder): those paths
    are returned, and are the AcfError's `files` (the index cache checks them)."""
    checker = Checker(file, text, with_sources)
    diagnostics = checker.run()
    if diagnostics:
        raise AcfError(diagnostics, files=tuple(checker.looked_at))
    return tuple(checker.looked_at)


def load(path: str | os.PathLike[str]) -> model.AcfFile:
    """Parse and check one ACF file, sources included (--acf-check, --retune);
    AcfError lists every problem."""
    text = read_text(path)
    file = parse_text(text, str(path))
    check(file, text, with_sources=True)
    return file
