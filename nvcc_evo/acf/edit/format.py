"""Formatter: canonical ACF text with every comment kept.

`format_text(text)` is a fixed point: formatting formatted text changes
nothing. Its pieces (`Writer`, `write_target`, `attach_comments`) also
serve nvcc_evo.acf.edit.retarget, which rewrites one unit's target block and
leaves every other byte of the file as it was. Writing the file is
nvcc_evo.acf.edit.write's (`rewrite`, `write_atomic`: locked, atomic, the file's
links, mode and spelling kept).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable

from nvcc_evo.acf import model
from nvcc_evo.acf.expressions import NO_SPAN, Span
from nvcc_evo.acf.edit.spelling import (show_arg, show_check, show_condition, show_domain,
                                        show_expr, show_metric,
                                        show_record, show_run_check, show_runs, show_space_require,
                                        show_string,
                                        show_value)
from nvcc_evo.acf.parse import parse_text

INDENT = "    "


# ---------------------------------------------------------------- comments
@dataclass
class Attached:
    """Comments owned by one statement."""

    leading: list[str] = field(default_factory=list)
    trailing: list[model.Comment] = field(default_factory=list)   # after the statement or block
                                                                  # header
    below: list[str] = field(default_factory=list)      # own lines kept under it (the file's header
                                                        # comment)
    footer: list[str] = field(default_factory=list)     # own lines before a block's '}'
    closing: list[str] = field(default_factory=list)    # after a block's '}'


@dataclass
class _Node:
    span: Span
    children: list["_Node"] | None   # None for a one-line statement

    @property
    def key(self) -> tuple[int, int]:
        return (self.span.start, self.span.end)


def _leaf(span: Span) -> _Node:
    return _Node(span, None)


def _block(span: Span, children: Iterable[_Node]) -> _Node:
    return _Node(span,
                 sorted((c for c in children if c.span.start >= 0), key=lambda n: n.span.start))


def _tree(file: model.AcfFile) -> _Node:
    """Statements with their spans, in source order."""
    units = []
    for unit in file.units:
        parts = [_leaf(p.span) for p in unit.pins]
        if unit.search_span.start >= 0:
            parts.append(_block(unit.search_span,
                                [_leaf(s.span) for s in unit.space + unit.requires]))
        if unit.tune is not None:
            parts.append(_block(unit.tune.span, [_leaf(s) for _, s in unit.tune.item_spans]))
        if unit.bench is not None:
            parts.append(_block(unit.bench.span, [_leaf(s.span) for s in _bench_items(unit.bench)]))
        parts.extend(_target_node(t) for t in unit.targets)
        units.append(_block(unit.span, parts))
    return _block(Span(0, 0, 10**9, 0, 0, 10**12), [_leaf(file.header_span)] + units)


def _target_node(target: model.Target) -> _Node:
    parts = [_leaf(s.span) for s in target.settings]
    if target.provenance is not None:
        parts.append(_block(target.provenance_span, [_leaf(r.span) for r in target.provenance]))
    return _block(target.span, parts)


def _bench_items(bench: model.Bench) -> list:
    texts = [t for t in (bench.kernel, bench.reference, bench.command) if t is not None]
    runs = [part for part in (bench.confirm, bench.repeat, bench.timeout) if part is not None]
    return [*texts, *bench.metrics, *bench.run_checks, *runs, *bench.lets, *bench.args,
            *bench.launch,
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

    def _own(self, span: Span) -> Attached:
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

    def leaf(self, span: Span, text: str) -> None:
        own = self._own(span)
        for comment in own.leading:
            self._emit(comment, [])
        self._emit(text, own.trailing)
        for comment in own.below:
            self._emit(comment, [])

    def open(self, span: Span, header: str) -> None:
        own = self._own(span)
        for comment in own.leading:
            self._emit(comment, [])
        self._emit(header + " {", own.trailing)
        self.depth += 1

    def close(self, span: Span) -> None:
        own = self._own(span)
        # Comments whose statement no longer prints (merged lines) stay inside the block.
        for key, stray in self.comments.items():
            inside = span.start <= key[0] and key[1] <= span.end and span.start >= 0
            if key not in self.done and inside:
                self.done.add(key)
                trailing = [c.text for c in stray.trailing]
                for comment in stray.leading + trailing + stray.footer + stray.closing:
                    self._emit(comment, [])
        for comment in own.footer:
            self._emit(comment, [])
        self.depth -= 1
        self._emit("}", own.closing)


def unit_header(unit: model.Unit) -> str:
    """`unit "a.cu"`, `unit kernel "matmul_*"`: what opens a unit's block."""
    return ("unit kernel " if unit.is_kernel else "unit ") + " ".join(show_string(g)
                                                                      for g in unit.globs)


def _write_unit(w: Writer, unit: model.Unit) -> None:
    w.open(unit.span, unit_header(unit))
    for pin in unit.pins:
        w.leaf(pin.span, f"pin {pin.knob} = {show_value(pin.value)}")
    if unit.space or unit.search_span.start >= 0:
        w.open(unit.search_span, "search")
        for space in unit.space:
            unordered = " unordered" if space.unordered else ""
            w.leaf(space.span, f"{space.knob} in {show_domain(space.domain)}{unordered}")
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
    spans: dict[str, list[Span]] = {}
    for kind, span in tune.item_spans:
        spans.setdefault(kind, []).append(span)
    w.open(tune.span, "tune")
    if tune.minimize:
        w.leaf(spans.get("minimize", [NO_SPAN])[0], "minimize " + ", ".join(tune.minimize))
    for condition, span in zip(tune.require,
                               spans.get("require", []) + [NO_SPAN] * len(tune.require)):
        w.leaf(span, "require " + show_condition(condition))
    if tune.select is not None:
        where = " and ".join(show_condition(c) for c in tune.select_where)
        w.leaf(spans.get("select", [NO_SPAN])[-1],
               f"select {tune.select}" + (f" where {where}" if where else ""))
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
        w.leaf(launch.span,
               f"shared {dims}" if launch.what == "shared" else f"{launch.what} ({dims})")
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
