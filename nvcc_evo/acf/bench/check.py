"""The resolve stage's checks of a bench block (a part of resolve.Checker,
which has the file, `with_sources` and `error`): the kernel form (names,
dtypes, initialisers, launch dimensions, checks, a reference file inside the
ACF's folder; with sources, the bench evaluated at the unit's defaults) and
the command form (benchcommand's checks), never both.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Iterable

from nvcc_evo.acf import model, unitpath
from nvcc_evo.acf.expressions import Expr, Span
from nvcc_evo.acf.sources import unit_defines, unit_sources

from nvcc_evo.acf.bench import command as benchcommand, spec as benchspec
from nvcc_evo.system.files import not_regular


def listed(values: Iterable[str]) -> str:
    """Names, sorted, comma-separated (for messages)."""
    return ", ".join(sorted(values))


def shown(value: object) -> str:
    """A value as the ACF spells it (for messages)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return f"'{value}'"
    return repr(value)


class BenchChecks:
    """The bench block's checks; `error(span, message)` and `file` are the Checker's."""

    file: model.AcfFile
    looked_at: list[str]          # the files beside the ACF the verdict depends on (the Checker's)

    def error(self, span: Span, message: str) -> None:
        raise NotImplementedError              # resolve.Checker's

    def check_bench(self, bench: model.Bench, defines: set[str],
                    named: set[str] | None = None) -> None:
        """`defines`: the unit's define.* knobs; `named`: every other name an
        expression may use, the #defines of the unit's sources (None where they
        are not read: the wrapper's check, which never holds a build back)."""
        kernel_form = bench.kernel is not None or bench.args or bench.launch
        if bench.command is not None:
            if kernel_form:
                self.error(bench.span, "a bench block is either a kernel launch (kernel, arg, "
                           "grid, block) or a command with a metric, not both")
            if bench.metric is None:
                self.error(bench.command.span, "a bench command needs a `metric \"REGEX\"` line")
            for span, message in benchcommand.problems(bench):
                self.error(span, message)
            return
        if bench.metric is not None:
            for span, message in benchcommand.problems(bench):
                self.error(span, message)
            self.error(bench.metric.span, "a metric line needs a `command \"...\"` line")
            return
        for span in benchcommand.command_only(bench):
            self.error(span, "this statement belongs to a bench command (`command \"...\"` with a "
                             "metric)")
        if bench.kernel is None:
            self.error(bench.span, "a bench block needs `kernel NAME` (or `command` and `metric`)")
        if bench.reference is not None:
            self.check_reference(bench.reference)
        for what in ("grid", "block"):
            if bench.launch_dims(what) is None:
                self.error(bench.span, f"a bench block needs a `{what} (x[, y[, z]])` line")
        self.check_bench_names(bench, defines, named)

    def check_bench_at_defaults(self, unit: model.Unit, defines: set[str]) -> None:
        """The bench evaluates with the unit's own defaults (its source's
        #defines, then its pins): the baseline every search starts from must
        launch. Skipped where no source is beside the ACF or a searched define
        has no default there."""
        sources = unit_sources(unit, Path(self.file.path).parent)
        if not sources:
            return
        values = unit_defines(unit, sources[0])
        assert unit.bench is not None                  # (resolve calls this for a unit's bench)
        if not defines <= set(values):
            return
        try:
            benchspec.plan_bench(unit.bench, values)
        except benchspec.ExprError as problem:
            span = problem.node.span if problem.node.span.line > 0 else unit.bench.span
            self.error(span, f"with the unit's defaults ({sources[0].name}'s #defines and the "
                             f"pins): {problem}")

    def check_reference(self, reference: model.Text) -> None:
        path, _, function = reference.text.rpartition(":")
        if not path.endswith(".py") or not function.isidentifier():
            self.error(reference.span, "a reference reads \"FILE.py:FUNCTION\", got "
                                       f"'{reference.text}'")
            return
        self.check_named_file(path, reference.span, "reference file")

    def check_named_file(self, path: str, span: Span, what: str) -> None:
        """A file the ACF names: relative to its folder, there, and inside it."""
        folder = Path(self.file.path).parent
        problem = unitpath.path_problem(path, what)
        if problem is None:
            self.looked_at.append(str(folder / path))
        if problem is not None:
            self.error(span, problem)
        elif not (folder / path).is_file():
            kind = not_regular(folder / path)        # (a FIFO would hang the build that reads it)
            self.error(span, f"{what} '{path}' is not a regular file ({kind})" if kind else
                       f"{what} '{path}' not found next to the ACF ({folder})")
        elif unitpath.inside(folder / path, folder) is None:
            self.error(span, f"{what} '{path}' is a link out of the ACF's folder "
                       f"(to {os.path.realpath(folder / path)}); paths stay inside it")

    def check_bench_names(self, bench: model.Bench, defines: set[str],
                          named: set[str] | None) -> None:
        sizes: set[str] = set()
        known = None if named is None else defines | named
        for let in bench.lets:
            self.check_expr(let.expr, let.span, sizes, known)
            if let.name in sizes or let.name in defines:
                self.error(let.span, f"size '{let.name}' is already a size or a define")
            sizes.add(let.name)
        arrays: set[str] = set()
        for arg in bench.args:
            self.check_arg(arg, sizes, known)
            if arg.is_array:
                arrays.add(arg.name)
        if len({a.name for a in bench.args}) != len(bench.args):
            self.error(bench.span, "two kernel arguments share a name")
        for launch in bench.launch:
            limit = 1 if launch.what == "shared" else 3
            if len(launch.dims) > limit:
                self.error(launch.span, f"{launch.what} takes at most {limit} value(s), got "
                                        f"{len(launch.dims)}")
            for dim in launch.dims:
                self.check_expr(dim, launch.span, sizes, known)
        for check in bench.checks:
            if check.name not in arrays:
                self.error(check.span, "check names an array argument "
                           f"({listed(arrays) or 'none'}), got '{check.name}'")
            if check.exact and (check.rtol is not None or check.atol is not None):
                self.error(check.span, "a check is either exact or has tolerances, not both")
            for tolerance in (check.rtol, check.atol):
                if tolerance is not None and tolerance < 0:
                    self.error(check.span, f"tolerances are >= 0, got {tolerance}")

    def check_arg(self, arg: model.Arg, sizes: set[str], defines: set[str] | None) -> None:
        if arg.dtype not in benchspec.DTYPES:
            self.error(arg.span, f"unknown dtype '{arg.dtype}' (known: {listed(benchspec.DTYPES)})")
        if not arg.is_array:
            self.check_expr(arg.value, arg.span, sizes, defines)
            return
        self.check_expr(arg.count, arg.span, sizes, defines)
        if arg.init not in benchspec.INITS:
            self.error(arg.span, f"unknown initialiser '{arg.init}' (known: "
                                 f"{listed(benchspec.INITS)})")
            return
        allowed, positional = benchspec.INITS[arg.init]
        unnamed = [p for p in arg.params if p.name is None]
        if len(unnamed) > positional:
            self.error(arg.span, f"{arg.init}() takes named parameters ({', '.join(allowed)})")
        for param in arg.params:
            if param.name is not None and param.name not in allowed:
                self.error(arg.span, f"{arg.init}() has no parameter '{param.name}' "
                           f"(known: {', '.join(allowed) or 'none'})")
            self.check_expr(param.expr, arg.span, sizes, defines)

    def check_expr(self, expr: Expr | None, span: Span, sizes: set[str],
                   defines: set[str] | None) -> None:
        """Every name a size or a define (a knob's or a source's); `defines`
        None: any name may be a source's #define (checked where sources are read)."""
        for ref in benchspec.names_in(expr):
            if ref.name not in sizes and defines is not None and ref.name not in defines:
                self.error(ref.span, f"undefined name '{ref.name}' in expression (sizes: "
                           f"{listed(sizes) or 'none'}; defines: {listed(defines) or 'none'})")
        self.check_calls(expr)

    def check_calls(self, expr: Expr | None) -> None:
        for call in benchspec.calls_in(expr):
            known = benchspec.FUNCTIONS.get(call.function)
            if known is None:
                self.error(call.span, f"unknown function '{call.function}' "
                           f"(known: {listed(benchspec.FUNCTIONS)})")
            elif known[0] != len(call.args):
                self.error(call.span, f"{call.function}() takes {known[0]} arguments, got "
                                      f"{len(call.args)}")
