"""Formatter: canonical ACF text with every comment kept.

`format_text(text)` is a fixed point: formatting formatted text changes
nothing. Its pieces (`Writer`, `write_target`, `attach_comments`) also
serve nvcc_evo.acf.edit.retarget, which rewrites one unit's target block and
leaves every other byte of the file as it was. Writing the file is
nvcc_evo.acf.edit.write's (`rewrite`, `write_atomic`: locked, atomic, the file's
links, mode and spelling kept).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from nvcc_evo.acf import model
from nvcc_evo.acf.parse import parse_text

INDENT = "    "
BARE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")     # the grammar's NAME: ASCII (str.isidentifier takes é)
PRECEDENCE = {"+": 1, "-": 1, "*": 2, "/": 2, "%": 2}
KEYWORDS = frozenset(
    "acf unit pin search in step bool tune minimize require select where and baseline bench "
    "kernel let arg output grid block shared check rtol atol exact command metric target "
    "take group maximize exit not confirm rounds repeat timeout provenance true false".split())


# ---------------------------------------------------------------- values
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


def show_value(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return show_number(value)
    if BARE_NAME.fullmatch(value) and value not in KEYWORDS:
        return value
    return show_string(value)


def show_string(text: str) -> str:
    """Quoted so that the parser reads `text` back: a quote and a backslash
    before a quote, another backslash or the end are escaped; any other
    backslash is written as it is (`"time \\| ([0-9.]+)"`)."""
    return '"' + re.sub(r'\\(?=["\\]|$)|"', lambda m: "\\" + m.group(0), text) + '"'


def show_expr(expr: model.Expr, parent: int = 0) -> str:
    if isinstance(expr, model.Literal):
        return show_number(expr.value)
    if isinstance(expr, model.Ref):
        return expr.name
    if isinstance(expr, model.Call):
        return f"{expr.function}({', '.join(show_expr(a) for a in expr.args)})"
    if isinstance(expr, model.Unary):
        return "-" + show_expr(expr.operand, 3)
    own = PRECEDENCE[expr.op]
    left = show_expr(expr.left, own)
    if expr.op == "*" and isinstance(expr.left, model.Binary) and expr.left.op in "/%":
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
        bound = "baseline" if condition.bound == 1.0 else f"{show_value(condition.bound)} * baseline"
    else:
        bound = show_value(condition.bound)
    return f"{condition.metric} {condition.op} {bound}"


def show_arg(arg: model.Arg) -> str:
    if arg.count is None:                      # a scalar (not arg.is_array): the grammar gives it a value
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


def show_runs(bench: model.Bench) -> list[tuple[model.Span, str]]:
    """The command form's cost statements: confirm, repeat, timeout."""
    shown = []
    if bench.confirm is not None:
        parts = ["confirm"] + ([show_string(bench.confirm.command)] if bench.confirm.command is not None else [])
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
    bare = isinstance(record.value, str) and BARE_NAME.fullmatch(record.value) and record.value not in ("true", "false")
    return f"{record.key} = {record.value if bare else show_value(record.value)}{spread}"


# ---------------------------------------------------------------- comments
@dataclass
class Attached:
    """Comments owned by one statement."""

    leading: list[str] = field(default_factory=list)
    trailing: list[model.Comment] = field(default_factory=list)   # after the statement or block header
    below: list[str] = field(default_factory=list)      # own lines kept under it (the file's header comment)
    footer: list[str] = field(default_factory=list)     # own lines before a block's '}'
    closing: list[str] = field(default_factory=list)    # after a block's '}'


@dataclass
class _Node:
    span: model.Span
    children: list["_Node"] | None   # None for a one-line statement

    @property
    def key(self) -> tuple[int, int]:
        return (self.span.start, self.span.end)


def _leaf(span: model.Span) -> _Node:
    return _Node(span, None)


def _block(span: model.Span, children) -> _Node:
    return _Node(span, sorted((c for c in children if c.span.start >= 0), key=lambda n: n.span.start))


def _tree(file: model.AcfFile) -> _Node:
    """Statements with their spans, in source order."""
    units = []
    for unit in file.units:
        parts = [_leaf(p.span) for p in unit.pins]
        if unit.search_span.start >= 0:
            parts.append(_block(unit.search_span, [_leaf(s.span) for s in unit.space + unit.requires]))
        if unit.tune is not None:
            parts.append(_block(unit.tune.span, [_leaf(s) for _, s in unit.tune.item_spans]))
        if unit.bench is not None:
            parts.append(_block(unit.bench.span, [_leaf(s.span) for s in _bench_items(unit.bench)]))
        parts.extend(_target_node(t) for t in unit.targets)
        units.append(_block(unit.span, parts))
    return _block(model.Span(0, 0, 10**9, 0, 0, 10**12), [_leaf(file.header_span)] + units)


def _target_node(target: model.Target) -> _Node:
    parts = [_leaf(s.span) for s in target.settings]
    if target.provenance is not None:
        parts.append(_block(target.provenance_span, [_leaf(r.span) for r in target.provenance]))
    return _block(target.span, parts)


def _bench_items(bench: model.Bench):
    texts = [t for t in (bench.kernel, bench.reference, bench.command) if t is not None]
    runs = [part for part in (bench.confirm, bench.repeat, bench.timeout) if part is not None]
    return [*texts, *bench.metrics, *bench.run_checks, *runs, *bench.lets, *bench.args, *bench.launch,
            *bench.checks]


def attach_comments(file: model.AcfFile) -> dict[tuple[int, int], Attached]:
    """Give every comment an owner statement (see Attached)."""
    root = _tree(file)
    top = root.children or []                  # (a block: the header and the units)
    owners: dict[tuple[int, int], Attached] = {}
    own_lines = {c.line for c in file.comments if c.own_line}
    for comment in file.comments:
        node = root
        while node.children is not None:
            inner = [c for c in node.children if c.span.line <= comment.line <= c.span.end_line]
            if not inner:
                break
            node = inner[0]
        own = owners.setdefault(node.key, Attached())
        if node.children is None and node is not root:
            if comment.own_line and comment.line < node.span.line:
                own.leading.append(comment.text)
            else:
                own.trailing.append(comment)
        elif not comment.own_line and comment.line == node.span.line and node is not root:
            own.trailing.append(comment)
        elif node is root and _heads_the_file(comment, file, own_lines):
            owners.setdefault(top[0].key, Attached()).below.append(comment.text)
        elif not comment.own_line and comment.line == node.span.end_line and node is not root:
            own.closing.append(comment.text)
        else:
            following = [c for c in node.children or () if c.span.line > comment.line]
            target = owners.setdefault(following[0].key, Attached()) if following else own
            (target.leading if following else target.footer).append(comment.text)
    return owners


def _heads_the_file(comment: model.Comment, file: model.AcfFile, own_lines: set[int]) -> bool:
    """An own-line comment after the `acf` line and before the first unit, with
    a blank line between it and the unit: it is about the file, not the unit."""
    if not comment.own_line or comment.line <= file.header_span.line:
        return False
    first = file.units[0].span.line if file.units else None
    if first is None or comment.line > first:
        return False
    return any(line not in own_lines for line in range(comment.line + 1, first))


# ---------------------------------------------------------------- writer
class Writer:
    def __init__(self, comments: dict[tuple[int, int], Attached], depth: int = 0, margin: int = 0):
        self.comments, self.depth = comments, depth
        self.lines: list[str] = []
        self.margin = margin            # columns the caller puts before each line (update_target)
        self.done: set[tuple[int, int]] = set()

    def _own(self, span: model.Span) -> Attached:
        key = (span.start, span.end)
        self.done.add(key)
        return self.comments.get(key, Attached()) if span.start >= 0 else Attached()

    def _emit(self, text: str, trailing: list) -> None:
        """One line; a trailing comment two spaces after the code, or further
        right at the column it had (aligned comments stay aligned)."""
        line = INDENT * self.depth + text
        if trailing:
            first = trailing[0]
            column = first.column - 1 if isinstance(first, model.Comment) else 0
            line = line + " " * max(2, column - self.margin - len(line))
            line += " ".join(c.text if isinstance(c, model.Comment) else c for c in trailing)
        self.lines.append(line.rstrip() if text or trailing else "")

    def leaf(self, span: model.Span, text: str) -> None:
        own = self._own(span)
        for comment in own.leading:
            self._emit(comment, [])
        self._emit(text, own.trailing)
        for comment in own.below:
            self._emit(comment, [])

    def open(self, span: model.Span, header: str) -> None:
        own = self._own(span)
        for comment in own.leading:
            self._emit(comment, [])
        self._emit(header + " {", own.trailing)
        self.depth += 1

    def close(self, span: model.Span) -> None:
        own = self._own(span)
        # Comments whose statement no longer prints (merged lines) stay inside the block.
        for key, stray in self.comments.items():
            if key not in self.done and span.start <= key[0] and key[1] <= span.end and span.start >= 0:
                self.done.add(key)
                for comment in stray.leading + [c.text for c in stray.trailing] + stray.footer + stray.closing:
                    self._emit(comment, [])
        for comment in own.footer:
            self._emit(comment, [])
        self.depth -= 1
        self._emit("}", own.closing)


def unit_header(unit: model.Unit) -> str:
    """`unit "a.cu"`, `unit kernel "matmul_*"`: what opens a unit's block."""
    return ("unit kernel " if unit.is_kernel else "unit ") + " ".join(show_string(g) for g in unit.globs)


def _write_unit(w: Writer, unit: model.Unit) -> None:
    w.open(unit.span, unit_header(unit))
    for pin in unit.pins:
        w.leaf(pin.span, f"pin {pin.knob} = {show_value(pin.value)}")
    if unit.space or unit.search_span.start >= 0:
        w.open(unit.search_span, "search")
        for space in unit.space:
            w.leaf(space.span, f"{space.knob} in {show_domain(space.domain)}")
        for require in unit.requires:
            w.leaf(require.span, show_space_require(require))
        w.close(unit.search_span)
    if unit.tune is not None:
        _write_tune(w, unit.tune)
    if unit.bench is not None:
        _write_bench(w, unit.bench)
    for target in unit.targets:
        write_target(w, target)
    w.close(unit.span)


def _write_tune(w: Writer, tune: model.Tune) -> None:
    spans: dict[str, list[model.Span]] = {}
    for kind, span in tune.item_spans:
        spans.setdefault(kind, []).append(span)
    w.open(tune.span, "tune")
    if tune.minimize:
        w.leaf(spans.get("minimize", [model.NO_SPAN])[0], "minimize " + ", ".join(tune.minimize))
    for condition, span in zip(tune.require, spans.get("require", []) + [model.NO_SPAN] * len(tune.require)):
        w.leaf(span, "require " + show_condition(condition))
    if tune.select is not None:
        where = " and ".join(show_condition(c) for c in tune.select_where)
        w.leaf(spans.get("select", [model.NO_SPAN])[-1], f"select {tune.select}" + (f" where {where}" if where else ""))
    w.close(tune.span)


def _write_bench(w: Writer, bench: model.Bench) -> None:
    w.open(bench.span, "bench")
    if bench.kernel is not None:
        w.leaf(bench.kernel.span, f"kernel {show_value(bench.kernel.text)}")
    for text in (bench.reference, bench.command):
        if text is not None:
            w.leaf(text.span, f"{text.what} {show_string(text.text)}")
    for metric in bench.metrics:
        w.leaf(metric.span, show_metric(metric))
    for run_check in bench.run_checks:
        w.leaf(run_check.span, show_run_check(run_check))
    for span, line in show_runs(bench):
        w.leaf(span, line)
    for let in bench.lets:
        w.leaf(let.span, f"let {let.name} = {show_expr(let.expr)}")
    for arg in bench.args:
        w.leaf(arg.span, show_arg(arg))
    for launch in sorted(bench.launch, key=lambda x: ("grid", "block", "shared").index(x.what)):
        dims = ", ".join(show_expr(d) for d in launch.dims)
        w.leaf(launch.span, f"shared {dims}" if launch.what == "shared" else f"{launch.what} ({dims})")
    for check in bench.checks:
        w.leaf(check.span, show_check(check))
    w.close(bench.span)


def write_target(w: Writer, target: model.Target) -> None:
    gpu = f" {show_string(target.gpu)}" if target.gpu else ""
    w.open(target.span, f"target {', '.join(target.archs)}{gpu}")
    for setting in target.settings:
        w.leaf(setting.span, f"{setting.knob} = {show_value(setting.value)}")
    if target.provenance is not None:
        w.open(target.provenance_span, "provenance")
        for record in target.provenance:
            w.leaf(record.span, show_record(record))
        w.close(target.provenance_span)
    w.close(target.span)


def format_file(file: model.AcfFile) -> str:
    comments = attach_comments(file)
    w = Writer(comments)
    w.leaf(file.header_span, f"acf {file.version}")
    for unit in file.units:
        w.lines.append("")
        _write_unit(w, unit)
    root = comments.get((0, 10**12))
    if root is not None and root.footer:
        w.lines.append("")
        w.lines.extend(root.footer)
    return "\n".join(w.lines) + "\n"


def format_text(text: str, path: str = "<acf>") -> str:
    return format_file(parse_text(text, path))
