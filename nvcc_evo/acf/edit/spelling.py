"""The canonical spelling of one value, expression or statement of an ACF:
`show_value` (`false`, not `False`; a name bare where it is no keyword, else
quoted), `show_number` (the shortest float that reads back the same),
`show_string` (quoted so that the parser reads it back), `show_expr` (the
fewest parentheses). What the formatter writes, and what messages,
`--explain`, the summary and the report quote.
"""
from __future__ import annotations

import re

from nvcc_evo.acf import model
from nvcc_evo.acf.expressions import Binary, Call, Expr, Literal, Ref, Span, Unary

BARE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")     # the grammar's NAME: ASCII (str.isidentifier
                                                      # takes é)
PRECEDENCE = {"+": 1, "-": 1, "*": 2, "/": 2, "%": 2}
KEYWORDS = frozenset(
    "acf unit pin search in step bool tune minimize require select where and baseline bench "
    "kernel let arg output grid block shared check rtol atol exact command metric target "
    "take group maximize exit not confirm rounds repeat timeout provenance true false".split())


def show_number(value: int | float) -> str:
    """Integers as they are; floats in the shortest text that reads back the
    same, in exponent form (1e-5, not 1e-05 or 0.00001) below 1e-3 and from 1e16."""
    if isinstance(value, int) or value == 0 or 1e-3 <= abs(value) < 1e16:
        return repr(value)
    for digits in range(17):
        mantissa, exponent = f"{value:.{digits}e}".split("e")
        if float(f"{mantissa}e{exponent}") == value:
            return f"{mantissa}e{int(exponent)}"
    return repr(value)


def show_value(value: object) -> str:
    """A knob's value as the ACF spells it (a bool, a number, a bare name, else a string)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return show_number(value)
    text = str(value)
    if BARE_NAME.fullmatch(text) and text not in KEYWORDS:
        return text
    return show_string(text)


def show_string(text: str) -> str:
    """Quoted so that the parser reads `text` back: a quote and a backslash
    before a quote, another backslash or the end are escaped; any other
    backslash is written as it is (`"time \\| ([0-9.]+)"`)."""
    return '"' + re.sub(r'\\(?=["\\]|$)|"', lambda m: "\\" + m.group(0), text) + '"'


def show_expr(expr: Expr, parent: int = 0) -> str:
    if isinstance(expr, Literal):
        return show_number(expr.value)
    if isinstance(expr, Ref):
        return expr.name
    if isinstance(expr, Call):
        return f"{expr.function}({', '.join(show_expr(a) for a in expr.args)})"
    if isinstance(expr, Unary):
        return "-" + show_expr(expr.operand, 3)
    own = PRECEDENCE[expr.op]
    left = show_expr(expr.left, own)
    if expr.op == "*" and isinstance(expr.left, Binary) and expr.left.op in "/%":
        left = f"({left})"      # (A / B) * C: keep the truncating division visibly first
    text = f"{left} {expr.op} {show_expr(expr.right, own + 1)}"
    return f"({text})" if own < parent else text


def show_domain(domain: model.Domain) -> str:
    if isinstance(domain, model.BoolDomain):
        return "bool"
    if isinstance(domain, model.RangeDomain):
        step = f" step {domain.step}" if domain.step != 1 else ""
        return f"{domain.low}..{domain.high}{step}"
    return "{" + ", ".join(show_value(v) for v in domain.values) + "}"


def show_space_require(require: model.SpaceRequire) -> str:
    return f"require {show_expr(require.left)} {require.op} {show_expr(require.right)}"


def show_condition(condition: model.Condition) -> str:
    if condition.relative:
        bound = ("baseline" if condition.bound == 1.0
                 else f"{show_value(condition.bound)} * baseline")
    else:
        bound = show_value(condition.bound)
    return f"{condition.metric} {condition.op} {bound}"


def show_arg(arg: model.Arg) -> str:
    if arg.count is None:  # a scalar (not arg.is_array): the grammar gives it a value
        assert arg.value is not None
        return f"arg {arg.name} : {arg.dtype} = {show_expr(arg.value)}"
    if arg.init == "output":
        init = "output"
    else:
        params = ", ".join((f"{p.name}=" if p.name else "") + show_expr(p.expr) for p in arg.params)
        init = f"{arg.init}({params})"
    return f"arg {arg.name} : {arg.dtype}[{show_expr(arg.count)}] = {init}"


def show_check(check: model.Check) -> str:
    parts = [f"check {check.name}"]
    if check.rtol is not None:
        parts.append(f"rtol {show_value(check.rtol)}")
    if check.atol is not None:
        parts.append(f"atol {show_value(check.atol)}")
    if check.exact:
        parts.append("exact")
    return " ".join(parts)


def show_metric(metric: model.Metric) -> str:
    if metric.kernels:
        return f"metric {metric.name} kernels"
    parts = ["metric"] + ([metric.name] if metric.named else []) + [show_string(metric.regex)]
    if metric.take != "first":
        parts.append(f"take {metric.take}")
    if metric.group is not None:
        parts.append(f"group {metric.group}")
    if metric.unit:
        parts.append(f"unit {show_string(metric.unit)}")
    return " ".join(parts + (["maximize"] if metric.maximize else []))


def show_run_check(check: model.RunCheck) -> str:
    return {"exit": f"check exit {check.value}", "match": f"check {show_string(str(check.value))}",
            "absent": f"check not {show_string(str(check.value))}",
            "command": f"check command {show_string(str(check.value))}"}[check.kind]


def show_runs(bench: model.Bench) -> list[tuple[Span, str]]:
    """The command form's cost statements: confirm, repeat, timeout."""
    shown = []
    if bench.confirm is not None:
        parts = ["confirm"]
        parts += [show_string(bench.confirm.command)] if bench.confirm.command is not None else []
        parts += [f"rounds {bench.confirm.rounds}"] if bench.confirm.rounds is not None else []
        shown.append((bench.confirm.span, " ".join(parts)))
    if bench.repeat is not None:
        low, high = bench.repeat.low, bench.repeat.high
        shown.append((bench.repeat.span, f"repeat {low}" + (f"..{high}" if high != low else "")))
    if bench.timeout is not None:
        shown.append((bench.timeout.span, f"timeout {show_number(bench.timeout.seconds)}"))
    return shown


def show_record(record: model.Record) -> str:
    """`key = value`: a name bare, as the grammar reads it back in a record (a
    keyword is a name there: `backend = command` as `backend = static`)."""
    spread = f" +- {show_value(record.spread)}" if record.spread is not None else ""
    bare = isinstance(record.value,
                      str) and BARE_NAME.fullmatch(record.value) and record.value not in ("true",
                                                                                          "false")
    return f"{record.key} = {record.value if bare else show_value(record.value)}{spread}"
